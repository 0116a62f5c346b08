"""Per-person caps inside a tenant (R14, issue 37 item 1): what the compiler writes, the API a
lead sets them through (bad input: a 400 naming the field, nothing changed), and the cluster
(the stand-in with the real kubectl, ``--as`` each person) holding each person to their queue."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
import yaml

from quotas.kube.compiler import compile_cluster
from quotas.kube.job_caps import JOB_SLOTS_FLAVOR, JOB_SLOTS_RESOURCE
from quotas.kube.person_caps import ANNOTATION_PREFIX, POLICY_NAME, person_key
from quotas.kube.spec import (
    CapSpec,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    PersonSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.kube.validate import validate_objects
from quotas.models import PersonCap
from quotas.sync import tenant_push
from tenants.models import AuditEvent
from tests.quotas.test_enforcement import kueue_configmap
from tests.standin import kubectl, kubectl_json

GPU = "nvidia.com/gpu"
CLUSTER = ClusterSpec(
    name="demo-h100",
    flavors=(
        FlavorSpec("cpu-nodes", "cpu", {"cpu": Decimal(64), "memory": Decimal(2**38)}),
        FlavorSpec(
            "h100-80gb",
            "gpu",
            {GPU: Decimal(16), "cpu": Decimal(128), "memory": Decimal(2**40)},
            gpu_model="NVIDIA H100 80GB HBM3",
        ),
    ),
)


def team_a(people: tuple[PersonSpec, ...] = ()) -> TenantSpec:
    return TenantSpec(
        slug="team-a",
        generation=3,
        namespaces=(NamespaceSpec("team-a-training"), NamespaceSpec("team-a-inference")),
        quotas=(
            QuotaSpec("h100-80gb", GPU, Decimal(4), Decimal(6), lending_limit=Decimal(2)),
            QuotaSpec("h100-80gb", "cpu", Decimal(32), Decimal(48)),
        ),
        fair_share_weight=3,
        editors=("alice", "carol"),
        people=people,
    )


CAROL = PersonSpec("carol", (CapSpec("h100-80gb", GPU, Decimal(2)),))
PIPELINE = PersonSpec("", (CapSpec("h100-80gb", GPU, Decimal(1)),), pipeline=True)


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }


def gpu_line(queue: dict[str, Any], flavor_name: str = "h100-80gb") -> dict[str, Any]:
    return next(
        r
        for group in queue["spec"]["resourceGroups"]
        for f in group["flavors"]
        if f["name"] == flavor_name
        for r in f["resources"]
        if r["name"] == GPU
    )


# --- the compiler ---------------------------------------------------------------------------


def test_a_capped_person_gets_a_queue_under_the_tenants_cohort_within_its_limit() -> None:
    objects = compile_cluster(CLUSTER, [team_a((CAROL, PIPELINE))])
    assert validate_objects(objects) == []
    found = by_key(objects)

    cohort = found[("Cohort", "", "team-a.people")]
    assert cohort["spec"]["parentName"] == "portal-root"
    # The subtree (team queue + people) never borrows past the tenant's limit: 4 + 2 = 6.
    assert gpu_line(cohort) == {
        "name": GPU, "nominalQuota": "0", "borrowingLimit": "2", "lendingLimit": "2",
    }  # fmt: skip
    assert cohort["spec"]["fairSharing"] == {"weight": "3"}

    team = found[("ClusterQueue", "", "team-a")]
    assert team["spec"]["cohortName"] == "team-a.people"
    assert gpu_line(team) == {"name": GPU, "nominalQuota": "4", "borrowingLimit": "2"}
    assert "fairSharing" not in team["spec"]

    carol = found[("ClusterQueue", "", "team-a.carol")]
    assert carol["spec"]["cohortName"] == "team-a.people"
    assert gpu_line(carol) == {"name": GPU, "nominalQuota": "0", "borrowingLimit": "2"}
    assert carol["spec"]["namespaceSelector"] == team["spec"]["namespaceSelector"]
    assert carol["metadata"]["labels"]["portal.gpu-quota.io/tenant"] == "team-a"
    pipeline = found[("ClusterQueue", "", "team-a.pipeline.team")]
    assert gpu_line(pipeline)["borrowingLimit"] == "1"

    for namespace in ("team-a-training", "team-a-inference"):
        queue = found[("LocalQueue", namespace, "carol")]
        assert queue["spec"] == {"clusterQueue": "team-a.carol"}
        annotations = found[("Namespace", "", namespace)]["metadata"]["annotations"]
        assert annotations[ANNOTATION_PREFIX + "carol"] == "carol"
        assert annotations[ANNOTATION_PREFIX + "pipeline.team"] == (
            f"system:serviceaccount:{namespace}:team-a-workloads"
        )
        assert ("LocalQueue", namespace, "default") in found  # uncapped members' queue
    assert ("ValidatingAdmissionPolicy", "", POLICY_NAME) in found


def test_the_running_job_cap_holds_the_team_and_its_people_together() -> None:
    # Job slots (the running-job cap) are the team's: a person's queue borrows them from the
    # team's queue inside the tenant's Cohort, and that Cohort neither borrows nor lends any,
    # so the team's queue and every person's admit at most 5 pods together.
    tenant = replace(team_a((CAROL,)), max_running_jobs=5, max_queued_jobs=20)
    objects = compile_cluster(CLUSTER, [tenant])
    assert validate_objects(objects) == []
    found = by_key(objects)

    def slots(obj: dict[str, Any]) -> dict[str, Any]:
        for group in obj["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                if flavor["name"] == JOB_SLOTS_FLAVOR:
                    [line] = flavor["resources"]
                    assert line["name"] == JOB_SLOTS_RESOURCE
                    return line
        raise AssertionError(f"{obj['metadata']['name']} has no job slots")

    assert slots(found[("ClusterQueue", "", "team-a")]) == {
        "name": "pods", "nominalQuota": "5", "borrowingLimit": "0",
    }  # fmt: skip
    assert slots(found[("Cohort", "", "team-a.people")]) == {
        "name": "pods", "nominalQuota": "0", "borrowingLimit": "0", "lendingLimit": "0",
    }  # fmt: skip
    assert slots(found[("ClusterQueue", "", "team-a.carol")]) == {
        "name": "pods", "nominalQuota": "0",
    }  # fmt: skip


def test_without_caps_nothing_changes() -> None:
    plain = compile_cluster(CLUSTER, [team_a()])
    found = by_key(plain)
    assert ("Cohort", "", "team-a.people") not in found
    assert ("ValidatingAdmissionPolicy", "", POLICY_NAME) not in found
    assert found[("ClusterQueue", "", "team-a")]["spec"]["cohortName"] == "portal-root"
    assert gpu_line(found[("ClusterQueue", "", "team-a")])["lendingLimit"] == "2"


def test_odd_usernames_get_distinct_valid_queue_names() -> None:
    people = (
        PersonSpec("Carol.Smith@example.com", ()),
        PersonSpec("carol-smith-example-com", ()),
        PersonSpec("default", ()),
    )
    keys = [person_key(p) for p in people]
    assert len(set(keys)) == 3 and "default" not in keys
    objects = compile_cluster(CLUSTER, [team_a(people)])
    assert validate_objects(objects) == []


# --- the API --------------------------------------------------------------------------------


def carol_caps(api_as, world, caps, actor=None):  # type: ignore[no-untyped-def]
    return api_as(actor or world.alice).patch(
        "/api/v1/tenants/team-a/members/carol/", {"caps": caps}, format="json"
    )


def line(amount: Any, **overrides: str) -> dict[str, Any]:
    return {"cluster": "demo-a100", "flavor": "a100-80gb", "resource": GPU, "amount": amount,
            **overrides}  # fmt: skip


def test_a_lead_caps_a_member_through_the_members_api(world, api_as) -> None:
    response = carol_caps(api_as, world, [line(2)])
    assert response.status_code == 200, response.content
    assert response.json()["caps"] == [
        {"cluster": "demo-a100", "flavor": "a100-80gb", "resource": GPU, "amount": "2",
         "cluster_queue": "team-a.carol"}
    ]  # fmt: skip
    listed = api_as(world.carol).get("/api/v1/tenants/team-a/members/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert {r["username"]: len(r["caps"]) for r in rows}["carol"] == 1
    event = AuditEvent.objects.filter(action="person_cap.set").latest("pk")
    assert event.after["caps"] == {f"demo-a100/a100-80gb {GPU}": "2.000"}
    # Removing it (amount null) leaves no cap.
    assert carol_caps(api_as, world, [line(None)]).json()["caps"] == []


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        (line(11), "caps[0].amount", "above the tenant's limit of 10"),
        (line(-1), "caps[0].amount", "negative"),
        (line("1.5"), "caps[0].amount", "whole number"),
        (line(2, flavor="h100-80gb"), "caps[0].flavor", "no quota on flavor"),
        (line(2, resource="nvidia.com/mig-1g.10gb"), "caps[0].resource", "covers"),
    ],
)
def test_bad_caps_are_refused_naming_the_field_and_change_nothing(
    world, api_as, given, field, words
) -> None:
    assert carol_caps(api_as, world, [line(3)]).status_code == 200
    response = carol_caps(api_as, world, [line(1), given] if field.startswith("x") else [given])
    assert response.status_code == 400, response.content
    body = response.json()
    assert words in str(body), body
    assert field in str(body), body
    assert [c.amount for c in PersonCap.objects.filter(tenant=world.team_a)] == [Decimal(3)]


def test_only_a_lead_or_an_admin_caps_and_only_an_admin_sets_the_default(world, api_as) -> None:
    assert carol_caps(api_as, world, [line(2)], actor=world.carol).status_code == 403
    assert carol_caps(api_as, world, [line(2)], actor=world.bob).status_code == 404
    default = {"subject": "default", "caps": [line(1)]}
    url = "/api/v1/tenants/team-a/person-caps/"
    assert api_as(world.alice).patch(url, default, format="json").status_code == 403
    assert api_as(world.admin).patch(url, default, format="json").status_code == 200
    pipeline = {"subject": "pipeline", "caps": [line(1)]}
    assert api_as(world.alice).patch(url, pipeline, format="json").status_code == 200
    assert api_as(world.bob).get(url).status_code == 404
    subjects = sorted(r["subject"] for r in api_as(world.carol).get(url).json())
    assert subjects == ["default", "pipeline"]
    assert not PersonCap.objects.filter(tenant=world.team_b).exists()


# --- on the cluster -------------------------------------------------------------------------

TRAINING = "team-a-training"


def job(standin, name: str, gpus: int, queue: str | None, as_user: str):  # type: ignore[no-untyped-def]
    metadata: dict[str, Any] = {"name": name, "namespace": TRAINING}
    if queue is not None:
        metadata["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "trainer",
                         "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}
                    ],
                }
            },
        },
    }  # fmt: skip
    path = standin.kubeconfig_path.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return kubectl(standin, "--as", as_user, "create", "-f", str(path), check=False)


def test_a_capped_person_submits_only_to_their_own_queue_as_the_cluster_sees_them(
    world, standin, api_as
) -> None:
    kueue_configmap(standin)
    assert carol_caps(api_as, world, [line(2)]).status_code == 200
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a.carol")
    assert gpu_line(queue, "a100-80gb")["borrowingLimit"] == "2"
    local = kubectl_json(standin, "get", "localqueue", "carol", "-n", TRAINING)
    assert local["spec"]["clusterQueue"] == "team-a.carol"

    # carol, into the team's queue (or none, which Kueue reads as the team's): refused.
    into_team = job(standin, "sneaky", 1, "default", "carol")
    assert into_team.returncode != 0
    assert f"ValidatingAdmissionPolicy '{POLICY_NAME}'" in into_team.stderr
    assert "carol has a cap in this team: submit to your own queue" in into_team.stderr
    # Her own queue: accepted.
    mine = job(standin, "sweep", 2, "carol", "carol")
    assert mine.returncode == 0, mine.stderr
    # alice is not capped: the team's queue is hers, carol's queue is not.
    assert job(standin, "finetune", 4, "default", "alice").returncode == 0
    borrowed = job(standin, "borrowed", 1, "carol", "alice")
    assert borrowed.returncode != 0
    assert "the queue carol holds the capped work of carol" in borrowed.stderr


def test_carol_labelling_her_work_with_alices_queue_is_refused(world, standin, api_as) -> None:
    kueue_configmap(standin)
    assert carol_caps(api_as, world, [line(2)]).status_code == 200
    alice = api_as(world.alice).patch(
        "/api/v1/tenants/team-a/members/alice/", {"caps": [line(6)]}, format="json"
    )
    assert alice.status_code == 200, alice.content
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    stolen = job(standin, "stolen", 3, "alice", "carol")
    assert stolen.returncode != 0
    assert "carol has a cap in this team" in stolen.stderr
    # Relabelling her own job to alice's queue afterwards is refused too.
    assert job(standin, "mine", 2, "carol", "carol").returncode == 0
    relabel = kubectl(
        standin, "--as", "carol", "label", "job", "mine", "-n", TRAINING,
        "kueue.x-k8s.io/queue-name=alice", "--overwrite", check=False,
    )  # fmt: skip
    assert relabel.returncode != 0 and POLICY_NAME in relabel.stderr


def test_a_person_removed_loses_their_queue_without_their_work_being_killed(
    world, standin, api_as
) -> None:
    from devcluster.kueue_sim import Endpoint, simulate_once
    from tests.alerts.conftest import NOW

    kueue_configmap(standin)
    assert carol_caps(api_as, world, [line(2)]).status_code == 200
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    assert job(standin, "sweep", 2, "carol", "carol").returncode == 0
    endpoint = Endpoint.from_kubeconfig(standin.kubeconfig_path)
    simulate_once(endpoint, NOW)  # Kueue admits it, and holds the queue while it is in use
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a.carol")
    assert queue["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]

    assert api_as(world.alice).delete("/api/v1/tenants/team-a/members/carol/").status_code == 204
    assert not PersonCap.objects.filter(tenant=world.team_a).exists()
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    simulate_once(endpoint, NOW)
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a.carol")
    assert queue["metadata"]["deletionTimestamp"]  # terminating: admits nothing new
    sweep = kubectl_json(standin, "get", "job", "sweep", "-n", TRAINING)
    assert sweep["spec"]["suspend"] is False  # still running, untouched

    # Her work ends: then, and only then, the queue goes.
    kubectl(standin, "delete", "job", "sweep", "-n", TRAINING)
    simulate_once(endpoint, NOW)
    gone = kubectl(standin, "get", "clusterqueue", "team-a.carol", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


# --- the check: carol capped at 2 GPUs, her third held, alice's work runs -----------


def test_carols_work_over_her_cap_is_held_while_hers_within_and_alices_run(
    world, standin, api_as, client
) -> None:
    from devcluster.kueue_sim import Endpoint, simulate_once
    from tests.alerts.conftest import NOW
    from usage import collector
    from usage.choices import WorkloadState
    from usage.models import Workload

    kueue_configmap(standin)
    assert carol_caps(api_as, world, [line(2)]).status_code == 200
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    endpoint = Endpoint.from_kubeconfig(standin.kubeconfig_path)
    # The demo's jobs: alice's in the team's queue, carol's in her own (the sim reads the
    # namespace's annotations as her kubectl would be told by the refusal).
    simulate_once(endpoint, NOW, teams=["team-a"], started=NOW)
    # carol asks for 3 more GPUs with kubectl, as herself.
    assert job(standin, "three", 3, "carol", "carol").returncode == 0
    simulate_once(endpoint, NOW, teams=["team-a"], started=NOW)

    def state(name: str) -> dict[str, Any]:
        items = kubectl_json(standin, "get", "workloads", "-n", TRAINING)["items"]
        [found] = [w for w in items if w["metadata"]["ownerReferences"][0]["name"] == name]
        return {c["type"]: c for c in found["status"]["conditions"]}

    assert state("resnet-sweep")["Admitted"]["status"] == "True"  # carol's 2 GPUs
    for held in ("eval-batch", "pretrain-8x", "three"):
        conditions = state(held)
        assert "Admitted" not in conditions
        assert (
            "insufficient unused quota for nvidia.com/gpu" in conditions["QuotaReserved"]["message"]
        )
    assert state("llm-finetune")["Admitted"]["status"] == "True"  # alice's 4 still run
    sweep = kubectl_json(standin, "get", "job", "resnet-sweep", "-n", TRAINING)
    assert sweep["spec"]["suspend"] is False
    assert kubectl_json(standin, "get", "job", "three", "-n", TRAINING)["spec"]["suspend"] is True
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a.carol")
    assert queue["status"]["admittedWorkloads"] == 1 and queue["status"]["pendingWorkloads"] == 3

    # The portal reads it back: carol's cap and use on the team page.
    collector.cluster_collect(cluster=world.a100, now=NOW)
    rows = Workload.objects.filter(cluster_queue="team-a.carol", state=WorkloadState.ADMITTED)
    assert [w.job_name for w in rows] == ["resnet-sweep"]
    client.force_login(world.alice)
    page = client.get("/tenants/team-a/team/").content.decode()
    assert 'data-cap="carol"' in page
    assert "2 GPUs (100%)" in page
    people = client.get("/tenants/team-a/people/caps/")
    assert people.status_code == 200 and "team-a.carol" in people.content.decode()


def test_the_tenants_queues_add_up_to_its_use() -> None:
    from usage.collector import summed_rows

    row = ("t", 1, 2.0, 7, 3, 5, None, None, None, None)
    person = ("t", 1, 2.0, 7, 3, 5, None, None, None, None)
    other_flavor = ("t", 1, 1.0, 7, 3, 6, None, None, None, None)
    assert summed_rows([row, person, other_flavor]) == [
        ("t", 1, 4.0, 7, 3, 5, None, None, None, None),
        other_flavor,
    ]


def test_a_member_reads_the_caps_page_and_only_a_lead_sets_a_cap_there(world, client) -> None:
    url = "/tenants/team-a/people/caps/"
    form = {"who": "carol", "line": f"demo-a100/a100-80gb/{GPU}", "amount": "2"}
    client.force_login(world.carol)
    assert client.get(url).status_code == 200
    assert client.post(url, form).status_code == 403
    client.force_login(world.bob)
    assert client.get(url).status_code == 404
    client.force_login(world.alice)
    too_many = client.post(url, {**form, "amount": "11"})
    assert too_many.status_code == 400
    assert "above the tenant&#x27;s limit of 10" in too_many.content.decode()
    assert not PersonCap.objects.exists()
    assert client.post(url, form).status_code == 302
    assert PersonCap.objects.get().amount == 2
    # An empty amount removes it.
    assert client.post(url, {**form, "amount": ""}).status_code == 302
    assert not PersonCap.objects.exists()


def test_caps_and_a_refused_role_change_in_one_patch_change_nothing(world, api_as) -> None:
    response = api_as(world.alice).patch(
        "/api/v1/tenants/team-a/members/carol/",
        {"caps": [line(2)], "role": "lead"},  # only a platform admin makes a lead
        format="json",
    )
    assert response.status_code == 403
    assert not PersonCap.objects.exists()
    assert not AuditEvent.objects.filter(action="person_cap.set").exists()
