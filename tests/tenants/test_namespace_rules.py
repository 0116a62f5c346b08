"""Namespaces the portal may give a tenant, and taking one away or adopting one, through
/api/v1/tenants/{slug}/namespaces/: system namespaces and those a cluster reserves are refused
with a 400 naming ``name`` (nothing changes); only platform admins add, remove and adopt;
another tenant's namespace answers 404. What the push does with them:
tests/quotas/test_namespaces_push.py."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tenants.models import AuditEvent, Namespace
from tenants.namespaces import reserved_reason
from tenants.services import namespace_create

URL = "/api/v1/tenants/team-a/namespaces/"


def refused(response, rule: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body["fields"]) == ["name"], body
    message = body["fields"]["name"][0]
    assert rule in message, message
    assert "Give team-a a namespace of its own" in message  # what to do instead
    return body


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("kube-system", "kube-system is a system namespace (Kubernetes' own"),
        ("kube-public", "kube-*"),
        ("kube-node-lease", "kube-*"),
        ("kube-anything", "kube-*"),
        ("default", "default is a system namespace (Kubernetes' default namespace)"),
        ("kueue-system", "Kueue's"),
        ("volcano-system", "Volcano's"),
        ("volcano-monitoring", "Volcano's"),
        ("gpu-operator", "GPU Operator's"),
        ("nvidia-network-operator", "Network Operator's"),
        ("cert-manager", "cert-manager's"),
        ("local-path-storage", "local-path"),
        ("gpu-quota-portal", "the portal's own namespace"),
    ],
)
def test_an_admin_cannot_give_a_tenant_a_system_namespace(world, api_as, name, rule):
    before = Namespace.objects.count(), AuditEvent.objects.count()
    body = refused(api_as(world.admin).post(URL, {"name": name}, format="json"), rule)
    assert "never gives it to a tenant nor writes into it" in body["fields"]["name"][0]
    assert (Namespace.objects.count(), AuditEvent.objects.count()) == before


@override_settings(PORTAL_NAMESPACE="quota-portal")
def test_the_portals_own_namespace_is_the_setting(world, api_as):
    refused(
        api_as(world.admin).post(URL, {"name": "quota-portal"}, format="json"),
        "quota-portal is the portal's own namespace",
    )
    ok = api_as(world.admin).post(URL, {"name": "gpu-quota-portal"}, format="json")
    assert ok.status_code == 201, ok.content


def test_a_namespace_a_cluster_reserves_is_refused(world, api_as):
    # Saved as Django admin and the Kueue configuration's reading save them: each save tells
    # tenants what the cluster reserves (``tenants.NamespaceReservation``).
    world.h100.reserved_namespaces = ["monitoring", "istio-*"]
    world.h100.mig_operator_namespace = "nvidia-gpu"
    world.h100.save()
    world.a100.kueue_config = {"namespace": "kueue-main"}
    world.a100.save(update_fields=["kueue_config"])
    admin = api_as(world.admin)
    refused(admin.post(URL, {"name": "monitoring"}, format="json"), "demo-h100 reserves it")
    refused(admin.post(URL, {"name": "istio-ingress"}, format="json"), "(istio-*)")
    refused(admin.post(URL, {"name": "nvidia-gpu"}, format="json"), "the GPU Operator runs there")
    refused(admin.post(URL, {"name": "kueue-main"}, format="json"), "Kueue runs there")
    assert not Namespace.objects.filter(name__in=["monitoring", "istio-ingress"]).exists()
    # A name that only starts like a reserved one without its "*" is a tenant's to have.
    assert admin.post(URL, {"name": "monitoring-a"}, format="json").status_code == 201


def test_tenant_creation_refuses_a_system_namespace_too(world):
    from core.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as caught:
        namespace_create(tenant=world.team_a, name="kube-flow", purpose="general", actor=None)
    assert caught.value.fields == {"name": [caught.value.message]}


def test_the_rule_in_words():
    assert reserved_reason("team-a-training") is None
    assert reserved_reason("kubeflow") is None  # "kube-*" needs the dash
    assert reserved_reason("defaults") is None
    assert reserved_reason("x", extra=[("x*", "because")]) == "x is reserved: because"


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_only_a_platform_admin_adds_removes_or_adopts_a_namespace(world, api_as, persona):
    client = api_as(getattr(world, persona))
    assert client.post(URL, {"name": "team-a-extra"}, format="json").status_code == 403
    assert client.delete(f"{URL}team-a-inference/").status_code == 403
    adopt = client.post(f"{URL}team-a-inference/adopt/", {"confirm": True}, format="json")
    assert adopt.status_code == 403
    assert Namespace.objects.filter(name="team-a-inference", adopted_at__isnull=True).exists()


def test_another_tenants_namespaces_answer_404(world, api_as):
    bob = api_as(world.bob)  # lead of team-b
    assert bob.delete(f"{URL}team-a-inference/").status_code == 404
    assert bob.post(f"{URL}team-a-inference/adopt/", {}, format="json").status_code == 404
    admin = api_as(world.admin)
    # team-b's namespace under team-a's URL: not team-a's to remove.
    gone = admin.delete(f"{URL}team-b-training/")
    assert gone.status_code == 404, gone.content
    assert Namespace.objects.filter(name="team-b-training").exists()


def test_an_admin_removes_a_namespace_audited(world, api_as):
    response = api_as(world.admin).delete(f"{URL}team-a-inference/")
    assert response.status_code == 204, response.content
    assert not Namespace.objects.filter(name="team-a-inference").exists()
    event = AuditEvent.objects.get(action="namespace.removed", object_id="team-a-inference")
    assert event.actor == world.admin and event.tenant == world.team_a
    assert event.before["name"] == "team-a-inference"


def test_the_last_namespace_stays(world, api_as):
    admin = api_as(world.admin)
    assert admin.delete(f"{URL}team-a-inference/").status_code == 204
    last = admin.delete(f"{URL}team-a-training/")
    assert last.status_code == 409, last.content
    assert "only namespace of team-a" in last.json()["fields"]["name"][0]
    assert Namespace.objects.filter(name="team-a-training").exists()


def test_removing_a_namespace_with_shares_goes_back_to_an_even_split(world, api_as):
    admin = api_as(world.admin)
    Namespace.objects.create(tenant=world.team_a, name="team-a-extra")
    shares = {"team-a-training": 50, "team-a-inference": 30, "team-a-extra": 20}
    assert admin.put(f"{URL}shares/", {"shares": shares}, format="json").status_code == 200
    assert admin.delete(f"{URL}team-a-extra/").status_code == 204
    event = AuditEvent.objects.get(action="namespace.removed", object_id="team-a-extra")
    assert event.before["share"] == "20%" and event.after["shares"] == "even"
    assert set(
        Namespace.objects.filter(tenant=world.team_a).values_list("quota_share", flat=True)
    ) == {None}


def test_adopting_shows_what_will_be_written_first_and_changes_nothing(world, api_as):
    response = api_as(world.admin).post(f"{URL}team-a-training/adopt/", {}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["adopted"] is False
    assert "Nothing changed" in body["message"]
    clusters = {c["cluster"]: c for c in body["clusters"]}
    assert set(clusters) == {"demo-a100", "demo-h100"}
    objects = clusters["demo-a100"]["objects"]
    assert objects[0].startswith("Namespace team-a-training: the portal's labels")
    for what in (
        "ResourceQuota team-a-training/",
        "LimitRange team-a-training/",
        "NetworkPolicy team-a-training/",
        "ServiceAccount team-a-training/team-a-workloads",
        "RoleBinding team-a-training/gpu-portal-edit",
        "LocalQueue team-a-training/default",
    ):
        assert any(o.startswith(what) for o in objects), (what, objects)
    assert all("team-a-inference" not in o for o in objects)
    assert "kept in the portal only" in clusters["demo-a100"]["state"]
    namespace = Namespace.objects.get(name="team-a-training")
    assert namespace.adopted_at is None
    assert not AuditEvent.objects.filter(action="namespace.adopted").exists()


def test_adopting_on_confirm_is_recorded_and_audited(world, api_as):
    admin = api_as(world.admin)
    response = admin.post(f"{URL}team-a-training/adopt/", {"confirm": True}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["adopted"] is True
    assert body["namespace"]["adopted_at"]
    namespace = Namespace.objects.get(name="team-a-training")
    assert namespace.adopted_at is not None and namespace.adopted_by == world.admin
    event = AuditEvent.objects.get(action="namespace.adopted", object_id="team-a-training")
    assert event.actor == world.admin and event.tenant == world.team_a
    listed = admin.get(URL).json()
    adopted = (
        {n["name"]: n["adopted_at"] for n in listed["results"]}
        if "results" in listed
        else {n["name"]: n["adopted_at"] for n in listed}
    )
    assert adopted["team-a-training"] and adopted["team-a-inference"] is None
    # Once is enough: a second adoption is a 409 and changes nothing.
    again = admin.post(f"{URL}team-a-training/adopt/", {"confirm": True}, format="json")
    assert again.status_code == 409, again.content
    assert AuditEvent.objects.filter(action="namespace.adopted").count() == 1


def test_a_reserved_namespace_cannot_be_adopted(world, api_as):
    Namespace.objects.create(tenant=world.team_a, name="kube-legacy")  # old data
    response = api_as(world.admin).post(
        f"{URL}kube-legacy/adopt/", {"confirm": True}, format="json"
    )
    refused(response, "kube-*")
    assert Namespace.objects.get(name="kube-legacy").adopted_at is None


def test_adopting_an_unknown_namespace_is_404_and_a_bad_body_400(world, api_as):
    admin = api_as(world.admin)
    assert admin.post(f"{URL}nope/adopt/", {}, format="json").status_code == 404
    bad = admin.post(f"{URL}team-a-training/adopt/", {"confirm": "perhaps"}, format="json")
    assert bad.status_code == 400 and "confirm" in bad.json()["fields"]
    extra = admin.post(f"{URL}team-a-training/adopt/", {"force": True}, format="json")
    assert extra.status_code == 400 and "force" in extra.json()["fields"]


# --- the adoption page ------------------------------------------------------------------------


def test_an_admin_adopts_a_namespace_on_its_page_after_seeing_what_is_written(world, client):
    client.force_login(world.admin)
    detail = client.get("/tenants/team-a/").content.decode()
    assert 'href="/console/tenants/team-a/namespaces/team-a-training/adopt/"' in detail
    page = client.get("/console/tenants/team-a/namespaces/team-a-training/adopt/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Adopt team-a-training" in html
    assert "RoleBinding team-a-training/gpu-portal-edit" in html
    assert Namespace.objects.get(name="team-a-training").adopted_at is None
    done = client.post(
        "/console/tenants/team-a/namespaces/team-a-training/adopt/", {"confirm": "yes"}
    )
    assert done.status_code == 302 and done["Location"] == "/tenants/team-a/"
    assert Namespace.objects.get(name="team-a-training").adopted_by == world.admin
    assert "adopted" in client.get("/tenants/team-a/").content.decode()
    assert (
        client.get("/console/tenants/team-a/namespaces/team-a-training/adopt/").status_code == 409
    )


def test_the_adoption_page_is_for_platform_admins(world, client):
    client.force_login(world.alice)
    assert "adopt…" not in client.get("/tenants/team-a/").content.decode()
    assert (
        client.get("/console/tenants/team-a/namespaces/team-a-training/adopt/").status_code == 403
    )
    posted = client.post(
        "/console/tenants/team-a/namespaces/team-a-training/adopt/", {"confirm": "yes"}
    )
    assert posted.status_code == 403
    client.force_login(world.bob)  # another tenant's lead: the same 403, nothing looked up
    assert (
        client.get("/console/tenants/team-a/namespaces/team-a-training/adopt/").status_code == 403
    )
    assert client.get("/console/tenants/nope/namespaces/nope/adopt/").status_code == 403
    assert Namespace.objects.get(name="team-a-training").adopted_at is None


def test_a_slug_whose_namespaces_would_be_system_ones_is_refused(world):
    from core.errors import ValidationFailed
    from tenants.models import Tenant
    from tenants.services import tenant_create

    with pytest.raises(ValidationFailed) as caught:
        tenant_create(slug="kube-team", display_name="Kube team", actor=world.admin)
    assert list(caught.value.fields) == ["slug"]
    assert "kube-team-training is a system namespace" in caught.value.message
    assert not Tenant.objects.filter(slug="kube-team").exists()
