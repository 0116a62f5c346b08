"""How a cluster keeps tenants within their limits, as admins choose it and users read it:
the enforcement mode (API and cluster page), namespace shares, and Kueue's configuration read
from the cluster at each push."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
import yaml

from quotas.kube.applier import ApplyError, KubernetesBackend
from quotas.models import Cluster, QuotaSet, SyncOutbox
from quotas.sync import tenant_push
from tenants.models import AuditEvent, Namespace
from tests.standin import kubectl, kubectl_json

KUEUE_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
manageJobsWithoutQueueName: false
integrations:
  frameworks: ["batch/job", "pod", "deployment"]
"""


def kueue_configmap(standin, text: str = KUEUE_CONFIG) -> None:
    """Kueue's manager configuration on the stand-in, where a Kueue install keeps it."""
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": text},
        },
    ]
    path = standin.kubeconfig_path.parent / "kueue-config.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    done = kubectl(standin, "apply", "-f", str(path), check=False)
    assert done.returncode == 0, done.stderr


# --- the mode, through the API ------------------------------------------------------------


def test_every_cluster_says_how_limits_hold_and_whether_work_gets_around_them(world, api_as):
    body = api_as(world.alice).get("/api/v1/clusters/demo-a100/").json()
    assert body["enforcement"]["mode"] == "kueue"
    assert body["enforcement"]["mode_display"] == "Kueue manages everything"
    # Nothing was read from the cluster yet: nothing is claimed.
    assert body["enforcement"]["bypass"] == "unknown"
    assert "not read yet" in body["enforcement"]["kueue_config_error"]


def test_an_admin_switches_a_cluster_to_namespace_split_and_every_tenant_is_pushed_again(
    world, api_as
):
    before = dict(
        QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation")
    )
    response = api_as(world.admin).patch(
        "/api/v1/clusters/demo-a100/", {"enforcement": "split"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["enforcement"]["mode"] == "split"
    assert response.json()["enforcement"]["bypass"] == "no"
    after = dict(QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation"))
    assert after == {tenant: generation + 1 for tenant, generation in before.items()}
    for tenant, generation in after.items():
        assert SyncOutbox.objects.filter(
            tenant_id=tenant, cluster=world.a100, generation=generation
        ).exists()
    event = AuditEvent.objects.get(action="cluster.enforcement_set")
    assert (event.before, event.after) == ({"enforcement": "kueue"}, {"enforcement": "split"})


@pytest.mark.parametrize(
    ("change", "body", "field", "words"),
    [
        ({"has_kueue": False}, {"enforcement": "kueue"}, "enforcement", "runs no Kueue"),
        ({"kubernetes_version": "1.29"}, {"enforcement": "kueue"}, "enforcement", "1.30"),
        ({}, {"enforcement": "loose"}, "enforcement", "loose"),
        ({}, {"enforcement": "split", "has_kueue": False}, "has_kueue", ""),
    ],
)
def test_a_mode_the_cluster_cannot_run_is_refused_and_changes_nothing(
    world, api_as, change, body, field, words
):
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split", **change)
    generations = list(QuotaSet.objects.order_by("pk").values_list("generation", flat=True))
    response = api_as(world.admin).patch("/api/v1/clusters/demo-a100/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert words in json.dumps(response.json())
    assert Cluster.objects.get(pk=world.a100.pk).enforcement == "split"
    assert list(QuotaSet.objects.order_by("pk").values_list("generation", flat=True)) == generations


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_only_platform_admins_change_the_mode(world, api_as, persona):
    response = api_as(getattr(world, persona)).patch(
        "/api/v1/clusters/demo-a100/", {"enforcement": "split"}, format="json"
    )
    assert response.status_code == 403
    assert Cluster.objects.get(pk=world.a100.pk).enforcement == "kueue"


# --- namespace shares ------------------------------------------------------------------------


@pytest.fixture
def two_namespaces(world):
    """team-a's namespaces: team-a-inference and team-a-training (as onboarding makes them)."""
    names = sorted(world.team_a.namespaces.values_list("name", flat=True))
    assert names == ["team-a-inference", "team-a-training"]
    return names


def shares_url(world) -> str:
    return f"/api/v1/tenants/{world.team_a.slug}/namespaces/shares/"


def test_an_admin_splits_a_tenants_limit_across_its_namespaces(world, api_as, two_namespaces):
    first, second = two_namespaces
    response = api_as(world.admin).put(
        shares_url(world), {"shares": {first: 70, second: "30"}}, format="json"
    )
    assert response.status_code == 200, response.content
    assert {n["name"]: n["quota_share"] for n in response.json()} == {first: 70.0, second: 30.0}
    # back to an even split
    response = api_as(world.admin).put(shares_url(world), {"shares": None}, format="json")
    assert {n["name"]: n["quota_share"] for n in response.json()} == {first: None, second: None}


@pytest.mark.parametrize(
    ("shares", "field", "words"),
    [
        ({"A": 60, "B": 30}, "B", "add up to 90%"),
        ({"A": 100}, "B", "has no share"),
        ({"A": 50, "B": 50, "team-z": 0}, "team-z", "no namespace"),
        ({"A": 0, "B": 100}, "A", "more than 0%"),
        ({"A": "50.005", "B": "49.995"}, "A", "decimal places"),
    ],
)
def test_shares_that_do_not_make_a_whole_are_refused_naming_the_namespace(
    world, api_as, two_namespaces, shares, field, words
):
    names = dict(zip("AB", two_namespaces, strict=True))
    body = {"shares": {names.get(key, key): value for key, value in shares.items()}}
    response = api_as(world.admin).put(shares_url(world), body, format="json")
    assert response.status_code == 400, response.content
    fields = response.json()["fields"]
    named = names.get(field, field)
    assert any(named in key for key in fields), fields
    assert words in json.dumps(response.json())
    assert set(Namespace.objects.values_list("quota_share", flat=True)) == {None}


def test_members_cannot_set_shares(world, api_as, two_namespaces):
    first, second = two_namespaces
    response = api_as(world.alice).put(
        shares_url(world), {"shares": {first: 50, second: 50}}, format="json"
    )
    assert response.status_code == 403


# --- Kueue's configuration, read at each push ------------------------------------------------


def test_a_push_reads_kueues_configuration_and_the_policy_follows_it(world, standin, api_as):
    kueue_configmap(standin)
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)
    assert outcome.ok, outcome.message
    world.a100.refresh_from_db()
    assert world.a100.kueue_config["frameworks"] == ["batch/job", "deployment", "pod"]
    body = api_as(world.alice).get("/api/v1/clusters/demo-a100/").json()["enforcement"]
    assert body["bypass"] == "no"
    assert any("Deployment" in line for line in body["explanation"])
    policy = kubectl_json(
        standin, "get", "validatingadmissionpolicy", "gpu-quota-portal-kueue-only"
    )
    assert "Pod, Job, CronJob, Deployment" in policy["spec"]["validations"][0]["messageExpression"]
    binding = kubectl_json(
        standin, "get", "validatingadmissionpolicybinding", "gpu-quota-portal-kueue-only"
    )
    assert binding["spec"]["validationActions"] == ["Deny"]


@pytest.mark.parametrize(
    ("text", "error"),
    [(None, "no ConfigMap kueue-system/kueue-manager-config"), ("[1, 2", "not YAML")],
)
def test_an_unreadable_kueue_configuration_says_unknown_and_the_push_still_happens(
    world, standin, api_as, text, error
):
    if text is not None:
        kueue_configmap(standin, text)
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)
    assert outcome.ok, outcome.message
    assert team_a_pushed(standin)
    body = api_as(world.alice).get("/api/v1/clusters/demo-a100/").json()["enforcement"]
    assert body["bypass"] == "unknown"
    assert error in body["kueue_config_error"]


def team_a_pushed(standin) -> bool:
    return kubectl(standin, "get", "clusterqueue", "team-a", check=False).returncode == 0


# --- pages -----------------------------------------------------------------------------------


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_cluster_page_says_how_limits_hold(world, client):
    Cluster.objects.filter(pk=world.a100.pk).update(
        kueue_config={"frameworks": ["batch/job"], "manageJobsWithoutQueueName": False}
    )
    client.force_login(world.alice)
    page = client.get("/clusters/demo-a100/")
    assert page.status_code == 200
    words = text_of(page.content.decode())
    assert "Kueue manages everything. No way around a tenant's limit" in words
    assert "Kueue manages Jobs and CronJobs here (1 integration enabled)" in words
    assert "data-enforcement-form" not in page.content.decode()  # members read only


def test_the_cluster_page_explains_the_elastic_cap_and_why_this_one_differs(world, client):
    client.force_login(world.alice)
    a100 = text_of(client.get("/clusters/demo-a100/").content.decode())
    assert "Elastic cap" in a100
    assert "a tenant's limit on a GPU flavor may be at most 62.5% of the flavor's capacity" in a100
    # Why demo-a100 is not at the usual 50%: team-a's limit of 10 of 16 needs 62.5%.
    assert (
        "The portal's usual cap is 50%; a platform admin set demo-a100's higher, so that the "
        "limits in force fit: team-a's limit of 10 on a100-80gb is more than the 8 that 50% of "
        "16 allows." in a100
    )
    assert "a100-80gb 16 10 10 (team-a)" in a100  # capacity, largest allowed, largest now

    h100 = text_of(client.get("/clusters/demo-h100/").content.decode())
    assert "may be at most 50% of the flavor's capacity" in h100
    assert "usual cap" not in h100  # nothing to explain where the cap is the usual one


def test_an_admin_changes_the_mode_on_the_cluster_page_and_a_member_cannot(world, client):
    client.force_login(world.alice)
    assert client.post("/clusters/demo-a100/", {"enforcement": "split"}).status_code == 403
    client.force_login(world.admin)
    response = client.post("/clusters/demo-a100/", {"enforcement": "split"})
    assert response.status_code == 302
    assert Cluster.objects.get(pk=world.a100.pk).enforcement == "split"
    page = client.get("/clusters/demo-a100/")
    assert "Namespace split." in text_of(page.content.decode())


def test_the_cluster_page_shows_a_refused_change(world, client):
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split", has_kueue=False)
    client.force_login(world.admin)
    response = client.post("/clusters/demo-a100/", {"enforcement": "kueue"})
    assert response.status_code == 400
    assert "runs no Kueue" in text_of(response.content.decode())


def test_shares_split_the_pushed_quotas(world, standin, two_namespaces):
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split")
    world.a100.refresh_from_db()
    first, second = two_namespaces
    Namespace.objects.filter(name=first).update(quota_share=Decimal(30))
    Namespace.objects.filter(name=second).update(quota_share=Decimal(70))
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    hard = {
        ns: kubectl_json(standin, "get", "resourcequota", "-n", ns, "gpu-portal-quota")["spec"][
            "hard"
        ]["requests.nvidia.com/gpu"]
        for ns in two_namespaces
    }
    assert hard == {first: "3", second: "7"}  # team-a's A100 limit is 10


# --- on the cluster, with the real kubectl -----------------------------------------------------


def create_pod(standin, namespace: str, name: str, gpus: int, labels: dict | None = None):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "main", "image": "trainer", "resources": {"limits": {GPU: str(gpus)}}}
            ]
        },
    }
    path = standin.kubeconfig_path.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(pod))
    return kubectl(standin, "create", "-f", str(path), check=False)


GPU = "nvidia.com/gpu"
QUEUED = {"kueue.x-k8s.io/queue-name": "default"}


def test_kueue_manages_everything_refuses_a_bare_gpu_pod_in_a_tenant_namespace(world, standin):
    kueue_configmap(standin)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    refused = create_pod(standin, "team-a-training", "bare", 1)
    assert refused.returncode != 0
    assert "ValidatingAdmissionPolicy 'gpu-quota-portal-kueue-only'" in refused.stderr
    assert "tenant team-a: this Pod requests GPUs but Kueue would not manage it" in refused.stderr
    assert "kueue.x-k8s.io/queue-name: default" in refused.stderr
    # What the message asks for passes; a pod without GPUs was never in question.
    assert create_pod(standin, "team-a-training", "queued", 1, QUEUED).returncode == 0
    assert create_pod(standin, "team-a-training", "cpu-only", 0).returncode == 0
    # The namespace's quota is the backstop: the whole limit (10), no more.
    over = create_pod(standin, "team-a-inference", "over", 11, QUEUED)
    assert over.returncode != 0 and "forbidden" in over.stderr


def test_namespace_split_refuses_what_would_take_the_namespaces_past_the_limit(world, standin):
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split")
    world.a100.refresh_from_db()
    Namespace.objects.filter(name="team-a-training").update(quota_share=Decimal(70))
    Namespace.objects.filter(name="team-a-inference").update(quota_share=Decimal(30))
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    assert create_pod(standin, "team-a-training", "train", 7).returncode == 0
    refused = create_pod(standin, "team-a-inference", "serve", 4)  # 7 + 4 > 10
    assert refused.returncode != 0
    assert (
        'pods "serve" is forbidden: exceeded quota: gpu-portal-quota, requested: '
        "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=3"
    ) in refused.stderr
    assert create_pod(standin, "team-a-inference", "serve", 3).returncode == 0
    quota = kubectl_json(
        standin, "get", "resourcequota", "-n", "team-a-training", "gpu-portal-quota"
    )
    assert quota["status"]["used"][f"requests.{GPU}"] == "7"


def test_a_policy_the_api_server_refuses_fails_the_push_and_keeps_the_last_good_state(
    world, standin, monkeypatch
):
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split")
    world.a100.refresh_from_db()
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    split = kubectl_json(
        standin, "get", "resourcequota", "-n", "team-a-training", "gpu-portal-quota"
    )
    assert split["spec"]["hard"][f"requests.{GPU}"] == "5"
    # The API server refuses the policy (an admission webhook of the cluster's own, say).
    refusal = "admission webhook denied the request: policies are frozen"
    real_apply = KubernetesBackend.apply

    def apply(self, obj, *, dry_run=False):  # type: ignore[no-untyped-def]
        if obj["kind"] == "ValidatingAdmissionPolicy":
            raise ApplyError(refusal, status=403)
        return real_apply(self, obj, dry_run=dry_run)

    monkeypatch.setattr(KubernetesBackend, "apply", apply)
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="kueue")
    world.a100.refresh_from_db()
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)
    assert not outcome.ok
    assert refusal in outcome.message and "ValidatingAdmissionPolicy" in outcome.message
    # Without the policy the namespaces keep their split quotas: nothing was relaxed.
    after = kubectl_json(
        standin, "get", "resourcequota", "-n", "team-a-training", "gpu-portal-quota"
    )
    assert after["spec"] == split["spec"]
