"""The isolation check per pair of tenants: tenant A's share of a GPU (its MIG instance, or its
time slice of a shared GPU) saturated while tenant B's is probed. Who owns which share, the
refusals (400 naming the field, nothing stored), the API, the page listing each pair with its
slowdown against the 5 % line, and a simulated result labelled so."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from core.errors import ValidationFailed
from gpu_agent.models import Gpu, IsolationProbe, MigInstance, Node
from gpu_agent.services.probes import (
    agent_probe_result,
    isolation_pairs,
    probe_request,
    probe_tenants,
    shared_gpus,
)
from quotas.choices import GPU_RESOURCE, FlavorKind
from quotas.models import FlavorResource, Quota, QuotaSet, ResourceFlavor
from tests.pages import logged_in

H100 = "NVIDIA H100 80GB HBM3"
PAIRS_API = "/api/v1/isolation-pairs/"
PAIRS_PAGE = "/fleet/isolation/"
MIG_UUID = "GPU-pair-0000-mig"
SHARED_UUID = "GPU-pair-0001-shared"


def _gpu(node: Node, uuid: str, index: int, *, mig: bool) -> Gpu:
    return Gpu.objects.create(
        node=node,
        uuid=uuid,
        index=index,
        name=H100,
        memory_total_mib=81559,
        mig_mode_current=mig,
        last_seen_at=timezone.now(),
    )


def _instance(gpu: Gpu, gi_id: int, profile: str, start: int, size: int, tenant: Any) -> None:
    MigInstance.objects.create(
        gpu=gpu,
        gi_id=gi_id,
        profile=profile,
        start=start,
        size=size,
        busy=tenant is not None,
        tenant=tenant,
        observed_at=timezone.now(),
    )


def _share(world: Any, flavor: ResourceFlavor, tenant: Any, limit: int) -> None:
    quota_set, _ = QuotaSet.objects.get_or_create(tenant=tenant, cluster=world.h100)
    Quota.objects.create(
        quota_set=quota_set,
        flavor=flavor,
        resource=GPU_RESOURCE,
        guaranteed=Decimal(0),
        limit=Decimal(limit),
    )


@pytest.fixture
def gpus(world: Any) -> dict[str, Gpu]:
    """On demo-h100: an H100 in MIG mode whose 3g.40gb runs team-a's pod and whose two
    1g.10gb run team-b's and nobody's; an H100 without MIG, time-sliced 4 ways, where team-a
    and team-b hold shares (team-c holds whole H100s only)."""
    node = Node.objects.create(name="pair-node", cluster=world.h100, last_report_at=timezone.now())
    mig = _gpu(node, MIG_UUID, 0, mig=True)
    _instance(mig, 1, "3g.40gb", 4, 4, world.team_a)
    _instance(mig, 2, "1g.10gb", 0, 1, world.team_b)
    _instance(mig, 3, "1g.10gb", 1, 1, None)
    shared = _gpu(node, SHARED_UUID, 1, mig=False)
    sliced = ResourceFlavor.objects.create(
        cluster=world.h100,
        name="h100-shared",
        kind=FlavorKind.GPU,
        gpu_model=H100,
        gpu_weight=Decimal("0.5"),
        time_slicing_replicas=4,
    )
    FlavorResource.objects.create(flavor=sliced, resource=GPU_RESOURCE, capacity=Decimal(8))
    _share(world, sliced, world.team_a, 2)
    _share(world, sliced, world.team_b, 1)
    return {"mig": mig, "shared": shared}


def _done(probe: IsolationProbe, alone: float, together: float) -> None:
    agent_probe_result(
        node=probe.gpu.node,
        probe_id=probe.pk,
        state="done",
        t_alone_s=alone,
        t_together_s=together,
        simulated=True,
        library="simulated",
        message="simulated: no GPU work was done",
    )


# --- who owns which share -------------------------------------------------------------------


def test_a_mig_probe_is_about_the_tenants_running_on_the_two_instances(world, gpus):
    assert [t.slug for t in probe_tenants(gpu=gpus["mig"])] == ["team-a", "team-b"]
    probe = probe_request(gpu=gpus["mig"], actor=world.admin)
    owners = {
        probe.target_gi_id: probe.target_tenant,
        probe.neighbour_gi_id: probe.neighbour_tenant,
    }
    assert owners == {1: world.team_a, 2: world.team_b}
    assert probe.target_tenant != probe.neighbour_tenant


def test_naming_the_probed_tenant_picks_its_instance_and_another_tenants(world, gpus):
    probe = probe_request(gpu=gpus["mig"], actor=world.admin, target_tenant=world.team_b)
    assert (probe.target_gi_id, probe.target_tenant) == (2, world.team_b)
    assert (probe.neighbour_gi_id, probe.neighbour_tenant) == (1, world.team_a)
    assert (probe.target_profile, probe.neighbour_profile) == ("1g.10gb", "3g.40gb")


def test_a_time_sliced_gpu_is_probed_between_two_holders_of_its_shares(world, gpus):
    assert [t.slug for t in probe_tenants(gpu=gpus["shared"])] == ["team-a", "team-b"]
    probe = probe_request(
        gpu=gpus["shared"],
        actor=world.admin,
        target_tenant=world.team_a,
        neighbour_tenant=world.team_b,
    )
    assert not probe.mig and probe.target_gi_id is None
    assert (probe.target_tenant, probe.neighbour_tenant) == (world.team_a, world.team_b)


@pytest.mark.parametrize(
    ("which", "fields", "field", "says"),
    [
        ("mig", {"target_tenant": "team_c"}, "target_tenant",
         "team-c runs on no GPU instance of GPU GPU-pair-0000-mig; tenants running on its "
         "instances: team-a, team-b."),
        ("mig", {"target_tenant": "team_a", "target_gi_id": 2}, "target_tenant",
         "GPU instance 2 of GPU GPU-pair-0000-mig is not team-a's"),
        ("mig", {"target_tenant": "team_a", "neighbour_tenant": "team_a"}, "neighbour_tenant",
         "must be another tenant than the probed one (team-a)"),
        ("shared", {"neighbour_tenant": "team_c"}, "neighbour_tenant",
         "team-c holds no share of NVIDIA H100 80GB HBM3 GPUs on demo-h100 "
         "(quota on a time-sliced or vGPU flavor of that model); tenants that do: team-a, team-b."),
    ],
)  # fmt: skip
def test_a_bad_pair_is_refused_naming_the_field_and_nothing_is_stored(
    world, gpus, which, fields, field, says
):
    named = {k: getattr(world, v) if k.endswith("_tenant") else v for k, v in fields.items()}
    with pytest.raises(ValidationFailed) as refused:
        probe_request(gpu=gpus[which], actor=world.admin, **named)
    assert list(refused.value.fields) == [field]
    assert says in refused.value.fields[field][0]
    assert not IsolationProbe.objects.exists()


# --- the pairs: service, API, page ----------------------------------------------------------


def test_each_pair_shows_its_latest_result_against_the_5_percent_line(world, gpus):
    first = probe_request(gpu=gpus["mig"], actor=world.admin)
    _done(first, 2.0, 2.04)  # +2 %: within the line
    shared = probe_request(
        gpu=gpus["shared"],
        actor=world.admin,
        target_tenant=world.team_a,
        neighbour_tenant=world.team_b,
    )
    _done(shared, 2.0, 3.2)  # +60 %: time slices share the GPU's cores
    pairs = {(p.saturating.slug, p.probed.slug): p for p in isolation_pairs()}
    # (saturating, probed): team-a's 3g.40gb beside team-b's 1g.10gb; the time slices the
    # other way round.
    assert set(pairs) == {("team-a", "team-b"), ("team-b", "team-a")}
    within, over = pairs[("team-a", "team-b")], pairs[("team-b", "team-a")]
    assert within.latest.pk == first.pk and within.latest.slowdown_pct == 2.0
    assert within.passed is True and within.failed == 0
    assert over.latest.pk == shared.pk and over.latest.slowdown_pct == 60.0
    assert over.passed is False and over.failed == 1
    assert over.latest.simulated and within.probes == over.probes == 1
    # A newer check of a pair replaces its row.
    again = probe_request(gpu=gpus["mig"], actor=world.admin, target_tenant=world.team_b)
    _done(again, 2.0, 2.3)
    latest = {(p.saturating.slug, p.probed.slug): p for p in isolation_pairs()}
    assert latest[("team-a", "team-b")].latest.pk == again.pk
    assert latest[("team-a", "team-b")].passed is False
    assert latest[("team-a", "team-b")].probes == 2


def test_the_api_asks_for_a_pair_and_lists_the_pairs(world, gpus, api_as):
    admin = api_as(world.admin)
    response = admin.post(
        f"/api/v1/gpus/{SHARED_UUID}/probes/",
        {"target_tenant": "team-b", "neighbour_tenant": "team-a"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["target_tenant"], body["neighbour_tenant"]) == ("team-b", "team-a")
    _done(IsolationProbe.objects.get(pk=body["id"]), 2.0, 2.06)
    listed = admin.get(PAIRS_API)
    assert listed.status_code == 200
    [pair] = listed.json()
    assert pair["saturating_tenant"] == "team-a" and pair["probed_tenant"] == "team-b"
    assert pair["uuid"] == SHARED_UUID and pair["node"] == "pair-node"
    assert pair["slowdown_pct"] == 3.0 and pair["passed"] is True and pair["simulated"] is True
    assert pair["finished_at"] is not None and pair["mig"] is False


def test_the_api_refuses_an_unknown_tenant_and_leads_get_403(world, gpus, api_as):
    admin = api_as(world.admin)
    refused = admin.post(
        f"/api/v1/gpus/{MIG_UUID}/probes/", {"neighbour_tenant": "nobody"}, format="json"
    )
    assert refused.status_code == 400
    assert "neighbour_tenant" in str(refused.json()) and "nobody" in str(refused.json())
    assert not IsolationProbe.objects.exists()
    assert api_as(world.alice).get(PAIRS_API).status_code == 403


def test_the_page_lists_pairs_with_pass_fail_gpu_time_and_the_simulated_mark(world, gpus):
    probe = probe_request(gpu=gpus["mig"], actor=world.admin)
    _done(probe, 2.0, 2.2)  # +10 %: over the line
    admin = logged_in(world.admin)
    html = admin.get(PAIRS_PAGE).content.decode()
    row = html[html.index('data-pair="team-a/team-b"') :].split("</tr>")[0]
    assert "10.0 %" in row and "fail" in row and "data-simulated" in row
    assert "GPU 0" in row and "pair-node" in row and "A on MIG 3g.40gb, B on 1g.10gb" in row
    assert probe.gpu.uuid in row  # the GPU's page is linked
    assert logged_in(world.alice).get(PAIRS_PAGE).status_code == 403


def test_the_gpu_page_offers_the_tenants_and_starts_a_check_of_the_pair(world, gpus):
    admin = logged_in(world.admin)
    page = admin.get(f"/fleet/gpus/{MIG_UUID}/").content.decode()
    assert 'name="target_tenant"' in page and '<option value="team-b">' in page
    response = admin.post(
        f"/fleet/gpus/{MIG_UUID}/probes/",
        {"target_tenant": "team-a", "neighbour_tenant": "team-b"},
        follow=True,
    )
    assert "team-b&#x27;s share saturated while team-a&#x27;s is probed" in (
        response.content.decode()
    )
    probe = IsolationProbe.objects.get()
    assert (probe.target_tenant, probe.neighbour_tenant) == (world.team_a, world.team_b)
    assert (probe.target_gi_id, probe.neighbour_gi_id) == (1, 2)


def test_the_pairs_page_lists_the_gpus_two_tenants_share_before_any_check(world, gpus):
    other = _gpu(gpus["mig"].node, "GPU-pair-0002-alone", 2, mig=True)
    _instance(other, 1, "3g.40gb", 0, 4, world.team_a)  # one tenant only: not shared
    assert [(row.gpu.uuid, row.how, [t.slug for t in row.tenants]) for row in shared_gpus()] == [
        (MIG_UUID, "mig", ["team-a", "team-b"]),
        (SHARED_UUID, "time-sliced", ["team-a", "team-b"]),
    ]
    html = logged_in(world.admin).get(PAIRS_PAGE).content.decode()
    assert "No check between two tenants yet" in html  # no probe has run
    shared = html[html.index("GPUs two tenants share") :]
    rows = ["".join(row.split("</tr>")[0].split()) for row in shared.split("<tr data-gpu=")[1:]]
    assert len(rows) == 2 and rows[0].startswith(f'"{MIG_UUID}"')
    assert "<td>pair-node</td><td>MIGinstances</td><td>team-a,team-b</td>" in rows[0]
    assert "timeslices(time,notmemory)</td><td>team-a,team-b</td>" in rows[1]
    assert f"/fleet/gpus/{SHARED_UUID}/#isolation" in shared  # a check starts there


def test_a_time_sliced_model_one_tenant_holds_is_not_shared(world, gpus):
    Quota.objects.filter(quota_set__tenant=world.team_b, flavor__name="h100-shared").delete()
    assert [row.gpu.uuid for row in shared_gpus()] == [MIG_UUID]
