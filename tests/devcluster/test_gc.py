"""The garbage collector: objects whose owners do not exist go a moment after they are written,
deleting an owner deletes its dependents (or orphans them when asked, and by default for Jobs),
and nothing else is collected."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, UnprocessibleEntityError

from devcluster import Handle
from devcluster.gc import DELAY_S
from tests.devcluster.conftest import Kubectl
from tests.devcluster.test_identities import NS, create, namespace

SETTLE_S = DELAY_S * 6  # long enough for the collector to have acted


def owner_ref(obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        **extra,
    }


def configmap(name: str, *owners: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, **metadata}
    if owners:
        meta["ownerReferences"] = list(owners)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def eventually(check: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the garbage collector did not act in time"
        time.sleep(0.02)


@pytest.fixture
def api(admin_client: ApiClient) -> DynamicClient:
    create(admin_client, namespace(NS))
    return DynamicClient(admin_client)


def resource(api: DynamicClient, kind: str, api_version: str = "v1") -> Any:
    return api.resources.get(api_version=api_version, kind=kind)


def exists(api: DynamicClient, kind: str, name: str, api_version: str = "v1") -> bool:
    try:
        resource(api, kind, api_version).get(name=name, namespace=NS)
    except NotFoundError:
        return False
    return True


def stored(api: DynamicClient, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = (
        resource(api, body["kind"], body["apiVersion"])
        .create(body=body, namespace=body["metadata"].get("namespace"))
        .to_dict()
    )
    return created


def test_an_owner_reference_to_a_uid_that_does_not_exist_is_collected(api: DynamicClient) -> None:
    owner = stored(api, configmap("owner"))
    ghost = {**owner_ref(owner), "name": "ghost", "uid": str(uuid.uuid4())}
    stored(api, configmap("orphan", ghost))
    # The owner's name with another uid (an owner deleted and created again) is no owner.
    stored(api, configmap("stale", {**owner_ref(owner), "uid": str(uuid.uuid4())}))
    assert exists(api, "ConfigMap", "orphan")  # written: the collector acts a moment later
    eventually(lambda: not exists(api, "ConfigMap", "orphan"))
    eventually(lambda: not exists(api, "ConfigMap", "stale"))
    assert exists(api, "ConfigMap", "owner")


def test_an_existing_owner_keeps_its_dependents_and_nothing_else_is_collected(
    api: DynamicClient,
) -> None:
    owner = stored(api, configmap("owner"))
    stored(api, configmap("dependent", owner_ref(owner, controller=True)))
    stored(api, configmap("free"))
    unknown_kind = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
                    "uid": str(uuid.uuid4())}  # fmt: skip
    stored(api, configmap("widget-owned", unknown_kind))
    time.sleep(SETTLE_S)
    for name in ("owner", "dependent", "free", "widget-owned"):
        assert exists(api, "ConfigMap", name), name


def test_a_missing_owner_among_others_is_only_unlisted(api: DynamicClient) -> None:
    owner = stored(api, configmap("owner"))
    ghost = {**owner_ref(owner), "name": "ghost", "uid": str(uuid.uuid4())}
    stored(api, configmap("shared", owner_ref(owner), ghost))

    def references() -> list[str]:
        found = resource(api, "ConfigMap").get(name="shared", namespace=NS).to_dict()
        return [r["name"] for r in found["metadata"].get("ownerReferences") or []]

    eventually(lambda: references() == ["owner"])


def test_deleting_an_owner_deletes_its_dependents_down_the_chain(
    api: DynamicClient, kubectl: Kubectl
) -> None:
    deployment = stored(api, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
    })  # fmt: skip
    replica_set = stored(api, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": NS,
                     "ownerReferences": [owner_ref(deployment, controller=True)]},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    })  # fmt: skip
    stored(api, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1-a", "namespace": NS,
                     "ownerReferences": [owner_ref(replica_set, controller=True)]},
        "spec": {"containers": [{"name": "main", "image": "web"}]},
    })  # fmt: skip
    time.sleep(SETTLE_S)
    assert exists(api, "Pod", "web-1-a")
    kubectl("delete", "deployment", "web", "-n", NS)
    eventually(lambda: not exists(api, "ReplicaSet", "web-1", "apps/v1"))
    eventually(lambda: not exists(api, "Pod", "web-1-a"))


def test_orphan_propagation_keeps_dependents_without_the_reference(
    api: DynamicClient, kubectl: Kubectl
) -> None:
    owner = stored(api, configmap("owner"))
    stored(api, configmap("dependent", owner_ref(owner)))
    kubectl("delete", "configmap", "owner", "-n", NS, "--cascade=orphan")
    time.sleep(SETTLE_S)
    kept = resource(api, "ConfigMap").get(name="dependent", namespace=NS).to_dict()
    assert "ownerReferences" not in kept["metadata"]


def job_with_pod(api: DynamicClient, name: str) -> None:
    job = stored(api, {"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": NS}, "spec": {}})  # fmt: skip
    stored(api, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-pod", "namespace": NS,
                     "ownerReferences": [owner_ref(job, controller=True)]},
        "spec": {"containers": [{"name": "main", "image": "trainer"}]},
    })  # fmt: skip


def test_jobs_orphan_their_pods_unless_kubectl_asks_for_background(
    api: DynamicClient, devcluster: Handle, kubectl: Kubectl
) -> None:
    job_with_pod(api, "plain")
    request = urllib.request.Request(  # noqa: S310 - the stand-in's own URL
        f"{devcluster.url}/apis/batch/v1/namespaces/{NS}/jobs/plain", method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - as above
        assert response.headers["Warning"] == (
            '299 - "child pods are preserved by default when jobs are deleted; set '
            "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
            'suppress this warning"'
        )
        assert json.loads(response.read())["status"] == "Success"
    time.sleep(SETTLE_S)
    assert exists(api, "Pod", "plain-pod")
    job_with_pod(api, "kubectl")
    kubectl("delete", "job", "kubectl", "-n", NS)  # kubectl sends propagationPolicy=Background
    eventually(lambda: not exists(api, "Pod", "kubectl-pod"))


def test_a_dependent_with_finalizers_is_only_marked(api: DynamicClient) -> None:
    owner = stored(api, configmap("owner"))
    stored(api, configmap("held", owner_ref(owner), finalizers=["example.com/keep"]))
    resource(api, "ConfigMap").delete(name="owner", namespace=NS)

    def marked() -> bool:
        found = resource(api, "ConfigMap").get(name="held", namespace=NS).to_dict()
        return bool(found["metadata"].get("deletionTimestamp"))

    eventually(marked)


def test_a_cluster_scoped_dependent_of_a_namespaced_owner_is_collected_with_an_event(
    api: DynamicClient, kubectl: Kubectl
) -> None:
    owner = stored(api, configmap("owner"))
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "owned-role", "ownerReferences": [owner_ref(owner)]},
        "rules": [],
    }
    stored(api, role)
    roles = resource(api, "ClusterRole", "rbac.authorization.k8s.io/v1")

    def gone() -> bool:
        try:
            roles.get(name="owned-role")
        except NotFoundError:
            return True
        return False

    eventually(gone)
    shown = json.loads(kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
    event = next(e for e in shown if e["reason"] == "OwnerRefInvalidNamespace")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "owned-role"
    assert event["source"] == {"component": "garbage-collector-controller"}
    assert event["message"] == (
        f"ownerRef [v1/ConfigMap, namespace: , name: owner, uid: {owner['metadata']['uid']}] "
        'does not exist in namespace ""'
    )


def test_foreground_deletes_the_dependents_too_and_bad_policies_are_refused(
    api: DynamicClient,
) -> None:
    owner = stored(api, configmap("owner"))
    stored(api, configmap("dependent", owner_ref(owner, blockOwnerDeletion=True)))
    configmaps = resource(api, "ConfigMap")
    with pytest.raises(UnprocessibleEntityError) as error:
        configmaps.delete(name="owner", namespace=NS, body={"propagationPolicy": "Sometimes"})
    assert 'Unsupported value: "Sometimes"' in json.loads(error.value.body)["message"]
    configmaps.delete(name="owner", namespace=NS, body={"propagationPolicy": "Foreground"})
    eventually(lambda: not exists(api, "ConfigMap", "dependent"))
