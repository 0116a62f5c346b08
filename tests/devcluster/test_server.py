"""The stand-in through the official Python client (``kubernetes.dynamic``), as the portal's
applier will use it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import (
    ApiException,
    ConflictError,
    InternalServerError,
    NotFoundError,
    TooManyRequestsError,
    UnprocessibleEntityError,
)
from kubernetes.dynamic.resource import Resource

from devcluster import Handle

KUEUE = "kueue.x-k8s.io/v1beta2"


def cluster_queue(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {"tier": "gold"}},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}],
                        }
                    ],
                }
            ],
            **spec,
        },
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def quota(name: str, ns: str, gpus: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
    }


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == error.status
    return body


@pytest.fixture
def cqs(dynamic: DynamicClient, devcluster: Handle) -> Resource:
    return dynamic.resources.get(api_version=KUEUE, kind="ClusterQueue")


@pytest.fixture
def namespaces(dynamic: DynamicClient, devcluster: Handle) -> Resource:
    return dynamic.resources.get(api_version="v1", kind="Namespace")


@pytest.fixture
def quotas(dynamic: DynamicClient, devcluster: Handle) -> Resource:
    return dynamic.resources.get(api_version="v1", kind="ResourceQuota")


def test_discovery_serves_builtin_kinds_and_crds(dynamic: DynamicClient) -> None:
    assert dynamic.version["kubernetes"]["gitVersion"] == "v1.33.0"
    cq = dynamic.resources.get(api_version=KUEUE, kind="ClusterQueue")
    assert (cq.name, cq.namespaced, cq.short_names) == ("clusterqueues", False, ["cq"])
    assert cq.subresources["status"].verbs == ["get", "patch", "update"]
    local_queue = dynamic.resources.get(api_version=KUEUE, kind="LocalQueue")
    assert local_queue.namespaced and "lq" in local_queue.short_names
    assert dynamic.resources.get(api_version="kueue.x-k8s.io/v1beta1", kind="Workload")
    assert dynamic.resources.get(api_version="scheduling.volcano.sh/v1beta1", kind="Queue")
    for api_version, kind in [
        ("v1", "ResourceQuota"),
        ("v1", "LimitRange"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
    ]:
        assert dynamic.resources.get(api_version=api_version, kind=kind)
    crds = dynamic.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    names = {item.metadata.name for item in crds.get().items}
    assert "clusterqueues.kueue.x-k8s.io" in names and "queues.scheduling.volcano.sh" in names
    with pytest.raises(ApiException) as error:
        crds.delete(name="clusterqueues.kueue.x-k8s.io")
    assert error.value.status == 405


def test_create_get_list_and_selectors(
    dynamic: DynamicClient, namespaces: Resource, quotas: Resource, cqs: Resource
) -> None:
    for name, team in [("team-a", "a"), ("team-b", "b"), ("shared", "")]:
        namespaces.create(body=namespace(name, **({"team": team} if team else {})))
        quotas.create(body=quota("gpu", name, "4", **({"team": team} if team else {})))
    created = namespaces.get(name="team-a")
    assert created.metadata.labels["kubernetes.io/metadata.name"] == "team-a"
    assert created.status.phase == "Active" and created.metadata.uid
    assert int(created.metadata.resourceVersion) > 0 and created.metadata.creationTimestamp

    def names(**selectors: str) -> list[str]:
        return [item.metadata.name for item in namespaces.get(**selectors).items]

    assert names(label_selector="team=a") == ["team-a"]
    assert names(label_selector="team==b") == ["team-b"]
    assert "team-a" not in names(label_selector="team!=a") and "shared" in names(
        label_selector="team!=a"
    )
    assert names(label_selector="team in (a, b)") == ["team-a", "team-b"]
    assert names(label_selector="team notin (a),team") == ["team-b"]
    assert names(label_selector="team") == ["team-a", "team-b"]
    assert "team-a" not in names(label_selector="!team") and "default" in names(
        label_selector="!team"
    )
    assert names(field_selector="metadata.name=shared") == ["shared"]

    everywhere = quotas.get()  # all namespaces: /api/v1/resourcequotas
    assert [(q.metadata.namespace, q.metadata.name) for q in everywhere.items] == [
        ("shared", "gpu"),
        ("team-a", "gpu"),
        ("team-b", "gpu"),
    ]
    assert int(everywhere.metadata.resourceVersion) >= 6
    assert [
        q.metadata.namespace for q in quotas.get(field_selector="metadata.namespace=team-b").items
    ] == ["team-b"]
    one = quotas.get(namespace="team-a", name="gpu")
    assert one.status.hard["requests.nvidia.com/gpu"] == "4"  # as the quota controller would

    for name in ["c1", "c2", "c3"]:
        cqs.create(body=cluster_queue(name))
    first = cqs.get(limit=2)
    assert [item.metadata.name for item in first.items] == ["c1", "c2"]
    assert first.metadata.remainingItemCount == 1
    rest = cqs.get(limit=2, _continue=first.metadata["continue"])
    assert [item.metadata.name for item in rest.items] == ["c3"]
    assert not rest.metadata["continue"]
    # CRD schema defaults are filled in, as the API server does.
    assert cqs.get(name="c1").spec.queueingStrategy == "BestEffortFIFO"
    assert cqs.get(name="c1").metadata.generation == 1


def test_errors_are_kubernetes_status(
    namespaces: Resource, quotas: Resource, cqs: Resource
) -> None:
    with pytest.raises(NotFoundError) as missing_namespace:
        quotas.create(body=quota("gpu", "nope", "1"), namespace="nope")
    assert status_of(missing_namespace.value)["message"] == 'namespaces "nope" not found'

    cqs.create(body=cluster_queue("dup"))
    with pytest.raises(ConflictError) as duplicate:
        cqs.create(body=cluster_queue("dup"))
    body = status_of(duplicate.value)
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'clusterqueues.kueue.x-k8s.io "dup" already exists'

    with pytest.raises(NotFoundError) as gone:
        cqs.get(name="absent")
    assert status_of(gone.value)["details"] == {
        "name": "absent",
        "group": "kueue.x-k8s.io",
        "kind": "clusterqueues",
    }


def test_update_with_stale_resource_version_conflicts(cqs: Resource) -> None:
    created = cqs.create(body=cluster_queue("team-a")).to_dict()
    updated = json.loads(json.dumps(created))
    updated["spec"]["cohortName"] = "gpus"
    after = cqs.replace(body=updated)
    assert after.metadata.generation == 2
    assert int(after.metadata.resourceVersion) > int(created["metadata"]["resourceVersion"])

    created["spec"]["cohortName"] = "other"  # still at the first resourceVersion
    with pytest.raises(ConflictError) as stale:
        cqs.replace(body=created)
    body = status_of(stale.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert cqs.get(name="team-a").spec.cohortName == "gpus"


def test_delete_and_namespace_cascade(
    namespaces: Resource, quotas: Resource, cqs: Resource
) -> None:
    cqs.create(body=cluster_queue("team-a"))
    deleted = cqs.delete(name="team-a")
    assert deleted.metadata.name == "team-a"  # a custom resource answers with the object
    with pytest.raises(NotFoundError):
        cqs.get(name="team-a")

    namespaces.create(body=namespace("team-a"))
    quotas.create(body=quota("gpu", "team-a", "1"))
    assert quotas.delete(name="gpu", namespace="team-a").status == "Success"
    quotas.create(body=quota("gpu", "team-a", "1"))
    namespaces.delete(name="team-a")
    assert quotas.get(namespace="team-a").items == []
    with pytest.raises(NotFoundError):
        namespaces.get(name="team-a")


def test_server_side_apply(dynamic: DynamicClient, cqs: Resource) -> None:
    manager = "gpu-quota-portal"
    desired = cluster_queue("team-a", cohortName="gpus", stopPolicy="Hold")
    created = dynamic.server_side_apply(cqs, body=desired, field_manager=manager)
    assert created.spec.cohortName == "gpus"
    entries = created.to_dict()["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [(manager, "Apply")]
    assert set(entries[0]["fieldsV1"]["f:spec"]) == {
        "f:cohortName",
        "f:namespaceSelector",
        "f:resourceGroups",
        "f:stopPolicy",
    }

    # Applying again with stopPolicy omitted removes it (the default comes back).
    del desired["spec"]["stopPolicy"]
    desired["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 8
    updated = dynamic.server_side_apply(cqs, body=desired, field_manager=manager)
    assert updated.spec.stopPolicy == "None"
    assert updated.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota == 8
    again = dynamic.server_side_apply(cqs, body=desired, field_manager=manager)
    assert again.metadata.resourceVersion == updated.metadata.resourceVersion  # no-op

    # Someone edits a field the portal owns, with a merge patch (as kubectl edit does).
    cqs.patch(
        name="team-a",
        body={"spec": {"cohortName": "elsewhere"}},
        content_type="application/merge-patch+json",
        field_manager="kubectl-edit",
    )
    with pytest.raises(ConflictError) as conflict:
        dynamic.server_side_apply(cqs, body=desired, field_manager=manager)
    body = status_of(conflict.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using '
        "kueue.x-k8s.io/v1beta2: .spec.cohortName"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kubectl-edit" using kueue.x-k8s.io/v1beta2',
            "field": ".spec.cohortName",
        }
    ]
    # The same value is no conflict (shared ownership); force takes the field over.
    forced = dynamic.server_side_apply(
        cqs, body=desired, field_manager=manager, force_conflicts=True
    )
    assert forced.spec.cohortName == "gpus"
    owners = {e["manager"] for e in forced.to_dict()["metadata"]["managedFields"]}
    assert owners == {manager}  # kubectl-edit owned only cohortName


def test_dry_run_stores_nothing(dynamic: DynamicClient, cqs: Resource) -> None:
    before = cqs.get().metadata.resourceVersion
    dry = cqs.create(body=cluster_queue("team-a"), dry_run="All")
    assert dry.metadata.uid and dry.spec.queueingStrategy == "BestEffortFIFO"
    dynamic.server_side_apply(
        cqs, body=cluster_queue("team-b"), field_manager="portal", dry_run="All"
    )
    assert cqs.get().items == []
    cqs.create(body=cluster_queue("team-c"))
    cqs.patch(
        name="team-c",
        body={"spec": {"cohortName": "x"}},
        content_type="application/merge-patch+json",
        dry_run="All",
    )
    assert cqs.get(name="team-c").spec.get("cohortName") is None
    assert int(cqs.get().metadata.resourceVersion) == int(before) + 1


def test_invalid_cluster_queue_is_422_with_causes(cqs: Resource) -> None:
    body = cluster_queue("team-a")
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 2
    with pytest.raises(UnprocessibleEntityError) as error:
        cqs.create(body=body)
    status = status_of(error.value)
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('ClusterQueue.kueue.x-k8s.io "team-a" is invalid: ')
    assert "borrowingLimit must be nil when cohort is empty" in status["message"]
    cause = status["details"]["causes"][0]
    # The CRD's rule sits on spec, so the API server names spec (not the borrowingLimit).
    assert cause["field"] == "spec"
    assert cause["message"] == (
        'Invalid value: "object": borrowingLimit must be nil when cohort is empty'
    )
    with pytest.raises(NotFoundError):
        cqs.get(name="team-a")


def test_status_subresource(dynamic: DynamicClient, cqs: Resource) -> None:
    created = cqs.create(body=cluster_queue("team-a"))
    assert "status" not in created.to_dict()
    # The main resource ignores status ...
    body = created.to_dict()
    body["status"] = {"pendingWorkloads": 3}
    assert "status" not in cqs.replace(body=body).to_dict()
    # ... which Kueue writes through /status, leaving spec and generation alone.
    status_path = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-a/status"
    patched = dynamic.request(
        "patch",
        status_path,
        body={
            "status": {"pendingWorkloads": 3, "admittedWorkloads": 1},
            "spec": {"cohortName": "x"},
        },
        content_type="application/merge-patch+json",
    )
    assert patched.status.pendingWorkloads == 3
    stored = cqs.get(name="team-a")
    assert stored.status.admittedWorkloads == 1
    assert stored.spec.get("cohortName") is None and stored.metadata.generation == 1
    assert dynamic.request("get", status_path).status.pendingWorkloads == 3


def test_faults_then_success_and_stats(devcluster: Handle, cqs: Resource) -> None:
    devcluster.fail_next(2, 500)
    for _ in range(2):
        with pytest.raises(InternalServerError) as error:
            cqs.get()
        assert status_of(error.value)["reason"] == "InternalError"
    assert cqs.get().items == []

    devcluster.fail_next(1, 429, verbs=["create"], retry_after_s=1)
    with pytest.raises(TooManyRequestsError) as throttled:
        cqs.create(body=cluster_queue("team-a"))  # urllib3 retries only idempotent methods
    assert throttled.value.headers["Retry-After"] == "1"
    assert status_of(throttled.value)["details"] == {"retryAfterSeconds": 1}
    cqs.create(body=cluster_queue("team-a"))

    devcluster.fail_next(1, None, delay_s=0.3)  # a slow answer, then the real one
    started = time.monotonic()
    assert len(cqs.get().items) == 1
    assert time.monotonic() - started >= 0.3

    devcluster.reset_stats()
    cqs.get()
    stats = devcluster.stats()
    assert stats["verbs"] == {"list": 1}
    assert stats["kinds"] == {"ClusterQueue": 1}
    assert stats["verb_kinds"] == {"list ClusterQueue": 1}


def test_random_faults_are_seeded(devcluster: Handle, cqs: Resource) -> None:
    def outcomes() -> list[bool]:
        devcluster.clear_faults()
        devcluster.fail_next(None, 503, probability=0.5, seed=7)
        results = []
        for _ in range(12):
            try:
                cqs.get()
                results.append(True)
            except ApiException as error:
                assert error.status == 503
                results.append(False)
        devcluster.clear_faults()
        return results

    first = outcomes()
    assert first == outcomes() and True in first and False in first


def test_token_is_checked(devcluster: Handle) -> None:
    def list_namespaces(token: str) -> int:
        configuration = client.Configuration(host=devcluster.url)
        configuration.api_key["BearerToken"] = f"Bearer {token}"
        with client.ApiClient(configuration) as api_client:
            try:
                client.CoreV1Api(api_client).list_namespace()
            except ApiException as error:
                assert status_of(error)["reason"] == "Unauthorized"
                return int(error.status)
        return 200

    assert list_namespaces(devcluster.token) == 200
    assert list_namespaces("wrong") == 401


def test_watch_streams_changes(dynamic: DynamicClient, cqs: Resource) -> None:
    cqs.create(body=cluster_queue("before"))
    later = threading.Timer(0.2, lambda: cqs.create(body=cluster_queue("during")))
    later.start()
    try:
        events = [(e["type"], e["object"].metadata.name) for e in dynamic.watch(cqs, timeout=1)]
    finally:
        later.join()
    assert events == [("ADDED", "before"), ("ADDED", "during")]


def test_system_namespaces_cannot_be_deleted(namespaces: Resource) -> None:
    with pytest.raises(ApiException) as error:
        namespaces.delete(name="default")
    assert error.value.status == 403
    assert status_of(error.value)["message"] == (
        'namespaces "default" is forbidden: this namespace may not be deleted'
    )


def test_server_managed_metadata_from_clients(cqs: Resource) -> None:
    body = cluster_queue("team-a")
    body["metadata"].update(
        uid="client-uid",
        creationTimestamp="2000-01-01T00:00:00Z",
        generation=7,
        managedFields=[{"manager": "liar", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
    )
    created = cqs.create(body=body).to_dict()
    metadata = created["metadata"]
    assert (
        metadata["uid"] != "client-uid" and metadata["creationTimestamp"] != "2000-01-01T00:00:00Z"
    )
    assert metadata["generation"] == 1
    assert [e["manager"] for e in metadata["managedFields"]] == ["OpenAPI-Generator"]

    changed = json.loads(json.dumps(created))
    changed["metadata"].update(uid="another-uid")
    with pytest.raises(ConflictError) as wrong_uid:
        cqs.replace(body=changed)
    assert (
        "Precondition failed: UID in precondition: another-uid"
        in status_of(wrong_uid.value)["message"]
    )

    changed["metadata"].update(
        uid=metadata["uid"], creationTimestamp="2000-01-01T00:00:00Z", managedFields=[]
    )
    changed["spec"]["cohortName"] = "gpus"
    updated = cqs.replace(body=changed).to_dict()["metadata"]
    assert updated["creationTimestamp"] == metadata["creationTimestamp"]
    assert [e["manager"] for e in updated["managedFields"]] == ["OpenAPI-Generator"]

    with pytest.raises(ApiException) as with_version:
        cqs.create(
            body={**cluster_queue("team-b"), "metadata": {"name": "team-b", "resourceVersion": "5"}}
        )
    assert "resourceVersion should not be set" in status_of(with_version.value)["message"]
