"""Egress exceptions: a lead asks in a quota request for destinations beyond the tenant's own
namespaces and DNS (a namespace or a network, a port and a protocol); a platform admin
approves; they compile into every namespace's NetworkPolicy. Bad input is a 400 naming the
field, storing nothing; another tenant's namespace must be named explicitly and the admin is
warned."""

from __future__ import annotations

import pytest

from approvals.models import QuotaChangeRequest
from quotas.kube.compiler import compile_tenant
from quotas.loader import cluster_spec, tenant_specs
from quotas.models import QuotaSet, SyncOutbox
from tenants.models import Namespace
from tests.approvals.conftest import URL, body, database_state
from tests.pages import logged_in, main

pytestmark = pytest.mark.django_db
NAME = "kubernetes.io/metadata.name"


def _egress(world, slug: str = "team-a") -> list[dict]:  # type: ignore[no-untyped-def]
    spec = cluster_spec(world.a100)
    [tenant] = [t for t in tenant_specs(world.a100) if t.slug == slug]
    policies = [o for o in compile_tenant(spec, tenant) if o["kind"] == "NetworkPolicy"]
    assert policies
    rules = policies[0]["spec"]["egress"]
    assert all(p["spec"]["egress"] == rules for p in policies)  # every namespace alike
    return rules


def test_a_lead_asks_an_admin_approves_and_the_policy_lets_it_out(world, api_as):
    before = _egress(world)
    filed = api_as(world.alice).post(
        URL,
        body(
            items=[],
            submit=True,
            egress_rules=[
                {"cidr": "10.40.1.7/16", "port": 443, "protocol": "TCP"},
                {"namespace": "model-cache", "port": 8080},
            ],
        ),
        format="json",
    )
    assert filed.status_code == 201, filed.json()
    # Stored canonical, shown on the request the admin decides.
    assert filed.json()["egress_rules"] == [
        {"port": 443, "protocol": "TCP", "cidr": "10.40.0.0/16"},
        {"port": 8080, "protocol": "TCP", "namespace": "model-cache"},
    ]
    assert _egress(world) == before  # nothing before approval
    outbox = SyncOutbox.objects.count()
    approved = api_as(world.admin).post(f"{URL}{filed.json()['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    assert SyncOutbox.objects.count() > outbox
    after = _egress(world)
    assert after[: len(before)] == before
    assert sorted(map(str, after[len(before) :])) == sorted(
        map(
            str,
            [
                {
                    "to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}],
                    "ports": [{"protocol": "TCP", "port": 443}],
                },
                {
                    "to": [{"namespaceSelector": {"matchLabels": {NAME: "model-cache"}}}],
                    "ports": [{"protocol": "TCP", "port": 8080}],
                },
            ],
        )
    )
    # A later request that changes other things keeps them; [] removes them.
    kept = api_as(world.alice).post(URL, body(items=[], submit=True, max_pods=77), format="json")
    assert kept.status_code == 201, kept.json()
    api_as(world.admin).post(f"{URL}{kept.json()['id']}/approve/", {}, format="json")
    assert len(_egress(world)) == len(before) + 2
    removed = api_as(world.alice).post(
        URL, body(items=[], submit=True, egress_rules=[]), format="json"
    )
    assert removed.status_code == 201, removed.json()
    api_as(world.admin).post(f"{URL}{removed.json()['id']}/approve/", {}, format="json")
    assert _egress(world) == before
    assert QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).egress_rules == []


@pytest.mark.parametrize(
    ("rule", "field", "words"),
    [
        ({"cidr": "10.0.0.0/33", "port": 443}, "egress_rules[0].cidr", "not an address"),
        ({"cidr": "0.0.0.0/0", "port": 443}, "egress_rules[0].cidr", "wider than a /8"),
        ({"cidr": "169.254.0.0/16", "port": 80}, "egress_rules[0].cidr", "metadata"),
        ({"cidr": "10.0.0.0/8", "port": 0}, "egress_rules[0].port", ""),
        ({"cidr": "10.0.0.0/8", "port": 70000}, "egress_rules[0].port", ""),
        ({"cidr": "10.0.0.0/8", "port": 53, "protocol": "ICMP"}, "egress_rules[0].protocol", ""),
        ({"namespace": "Model_Cache", "port": 80}, "egress_rules[0].namespace", "DNS-1123"),
        ({"namespace": "x", "cidr": "10.0.0.0/8", "port": 80}, "egress_rules[0]", "one"),
        ({"port": 80}, "egress_rules[0]", "one destination"),
        ({"namespace": "team-a-training", "port": 80}, "egress_rules[0].namespace", "own"),
        ({"namespace": "nobody-s", "tenant": "team-b", "port": 80}, "egress_rules[0].tenant", ""),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field_and_stores_nothing(world, api_as, rule, field, words):
    if "team-a-training" in str(rule):
        assert Namespace.objects.filter(name="team-a-training", tenant=world.team_a).exists()
    before = database_state()
    response = api_as(world.alice).post(
        URL, body(items=[], submit=True, egress_rules=[rule]), format="json"
    )
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"], response.json()
    assert words in response.json()["fields"][field][0]
    assert database_state() == before


def test_another_tenant_s_namespace_must_be_named_and_the_admin_is_warned(world, api_as):
    """team-a (hostile or not) cannot slip egress into team-b's namespace past the admin."""
    theirs = Namespace.objects.filter(tenant=world.team_b).first()
    assert theirs is not None
    before = database_state()
    hidden = api_as(world.alice).post(
        URL,
        body(items=[], submit=True, egress_rules=[{"namespace": theirs.name, "port": 80}]),
        format="json",
    )
    assert hidden.status_code == 400, hidden.json()
    assert "another tenant" in hidden.json()["fields"]["egress_rules[0].namespace"][0]
    wrong = api_as(world.alice).post(
        URL,
        body(
            items=[],
            submit=True,
            egress_rules=[{"namespace": theirs.name, "tenant": "team-a", "port": 80}],
        ),
        format="json",
    )
    assert wrong.status_code == 400, wrong.json()
    assert database_state() == before

    named = api_as(world.alice).post(
        URL,
        body(
            items=[],
            submit=True,
            egress_rules=[{"namespace": theirs.name, "tenant": "team-b", "port": 80}],
        ),
        format="json",
    )
    assert named.status_code == 201, named.json()
    request = QuotaChangeRequest.objects.get(pk=named.json()["id"])
    assert request.egress_rules == [
        {"port": 80, "protocol": "TCP", "namespace": theirs.name, "tenant": "team-b"}
    ]
    # What the admin deciding reads: the rule, naming team-b, and a warning about it.
    shown = api_as(world.admin).get(f"{URL}{request.pk}/").json()
    assert shown["egress_rules"][0]["tenant"] == "team-b"
    assert any("team-b agrees" in warning for warning in shown["warnings"]), shown["warnings"]
    page = main(logged_in(world.admin).get(f"/requests/{request.pk}/"))
    assert f"namespace {theirs.name} <strong>of tenant team-b</strong>, TCP port 80" in page
    assert "team-b agrees" in page
    assert "NetworkPolicy" in page  # the dry run shows the policy it changes
