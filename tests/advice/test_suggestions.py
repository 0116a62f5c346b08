"""Suggestions from a known month of usage: the numbers match the hand calculation in each
test, the draft goes through the approvals services, recomputing replaces open drafts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from advice.models import Suggestion
from advice.services import suggestions_compute
from approvals.choices import RequestStatus
from approvals.services import quota_request_submit
from quotas.choices import GPU_RESOURCE
from tenants.models import AuditEvent
from tests.advice.conftest import daily_rollups
from tests.conftest import World
from usage.models import Rollup

pytestmark = pytest.mark.django_db

# team-a on demo-a100 holds 6/10 of 16 GPUs (cap 62.5% -> 10); team-b 4/6, team-c 2/4.
TEAM_A_PEAKS = [3, 7.5, 9, 4, 0, 0, 6]


def test_guarantee_is_80_percent_of_the_highest_daily_peak(world: World) -> None:
    daily_rollups(
        tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu,
        peaks=TEAM_A_PEAKS, utilization=75, memory_peak_mib=60000,
    )  # fmt: skip
    [suggestion] = [
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.a100
    ]  # fmt: skip
    [line] = [n for n in suggestion.numbers if n["resource"] == GPU_RESOURCE]
    # Highest daily peak 9; 80% = 7.2 -> 8 whole GPUs. Others hold 4 + 2 of 16 -> 10 free.
    # Limit: max(10 in force, 8, 9) = 10, within the cap of 10. 75% utilisation: no memory-first.
    assert line["peak"] == 9
    assert line["p80"] == pytest.approx(7.2)
    assert line["guarantee_floor"] == 8
    assert line["elastic_cap"] == 10
    assert (line["guaranteed_before"], line["limit_before"]) == (6, 10)
    assert (line["guaranteed_after"], line["limit_after"]) == (8, 10)
    assert line["utilization_pct"] == 75
    assert line["memory_first"] is None
    assert line["days_with_usage"] == 5
    assert [day[1] for day in line["daily_peaks"]] == TEAM_A_PEAKS
    # Filed as a draft for the lead, through the approvals services.
    draft = suggestion.request
    assert draft is not None and draft.status == RequestStatus.DRAFT
    assert draft.requester == world.alice
    assert [(i.flavor, i.resource, i.guaranteed, i.limit) for i in draft.items.all()] == [
        (world.a100_gpu, GPU_RESOURCE, Decimal(8), Decimal(10))
    ]
    assert "highest daily peak 9, 80% = 7.2" in draft.reason
    assert AuditEvent.objects.filter(action="suggestion.computed", tenant=world.team_a).exists()
    # The lead submits it like any draft.
    quota_request_submit(request=draft, actor=world.alice)


def test_a_team_at_its_limit_gets_the_elastic_cap(world: World) -> None:
    # team-b 4/6 peaked at 6 = its limit: floor ceil(4.8) = 5 (16 - 6 - 2 = 8 free);
    # limit up to the cap of 10.
    daily_rollups(tenant=world.team_b, cluster=world.a100, flavor=world.a100_gpu, peaks=[2, 6, 5])
    [suggestion] = [
        s for s in suggestions_compute(tenant=world.team_b, actor=world.bob)
        if s.cluster == world.a100
    ]  # fmt: skip
    line = suggestion.numbers[[n["resource"] for n in suggestion.numbers].index(GPU_RESOURCE)]
    assert (line["guaranteed_after"], line["limit_after"]) == (5, 10)
    assert suggestion.request is not None
    assert suggestion.request.requester == world.bob


def test_memory_first_moves_the_guarantee_to_a_mig_slice(world: World) -> None:
    # team-a on demo-h100: small tier 4/6 of 16 H100 (weight 2). Peak 5, mean utilisation 10%,
    # peak memory 8,000 MiB. Floor ceil(4.0) = 4. 1g.10gb (weight 0.286 -> 14.3% of the
    # compute >= 10% x 1.1; 10,240 MiB >= 8,800) takes the guarantee: 4 slices, limit
    # min(cap 7 of 14, max(6, 4)) = 6; the whole-GPU line keeps limit 6, guarantee 0.
    daily_rollups(
        tenant=world.team_a, cluster=world.h100, flavor=world.h100_gpu,
        peaks=[5, 3, 4], utilization=10, memory_peak_mib=8000,
    )  # fmt: skip
    [suggestion] = [
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.h100
    ]  # fmt: skip
    line = next(n for n in suggestion.numbers if n["flavor"] == world.h100_gpu.name)
    assert line["memory_first"]["flavor"] == world.h100_mig.name
    assert suggestion.request is not None
    items = {
        (i.flavor.name, i.resource): (i.guaranteed, i.limit) for i in suggestion.request.items.all()
    }
    assert items == {
        (world.h100_gpu.name, GPU_RESOURCE): (Decimal(0), Decimal(6)),
        (world.h100_mig.name, "nvidia.com/mig-1g.10gb"): (Decimal(4), Decimal(6)),
    }


def test_recomputing_replaces_the_open_draft_and_keeps_submitted_ones(world: World) -> None:
    daily_rollups(tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu, peaks=[9])
    first = next(
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.a100
    )  # fmt: skip
    second = next(
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.a100
    )  # fmt: skip
    assert first.request is not None and second.request is not None
    first.request.refresh_from_db()
    assert first.request.status == RequestStatus.CANCELLED
    assert not Suggestion.objects.filter(pk=first.pk).exists()
    assert Suggestion.objects.filter(tenant=world.team_a, cluster=world.a100).count() == 1
    # Submitted: kept as it is; the next run files a new draft beside it.
    quota_request_submit(request=second.request, actor=world.alice)
    third = next(
        s for s in suggestions_compute(tenant=world.team_a)
        if s.cluster == world.a100
    )  # fmt: skip
    second.request.refresh_from_db()
    assert second.request.status == RequestStatus.PENDING
    assert Suggestion.objects.filter(pk=second.pk).exists()
    assert third.request is not None and third.request.status == RequestStatus.DRAFT


def test_no_change_and_no_lead_file_nothing(world: World) -> None:
    # team-c (2/4, no lead) peaked at 2.5: floor ceil(2.0) = 2, limit stays 4 -> no change.
    daily_rollups(tenant=world.team_c, cluster=world.a100, flavor=world.a100_gpu, peaks=[2.5])
    [same] = [s for s in suggestions_compute(tenant=world.team_c) if s.cluster == world.a100]
    assert same.request is None and same.note.startswith("No change")
    # A peak of 5 asks for 4/5, but team-c has no lead to review it.
    Rollup.objects.filter(tenant_id=world.team_c.pk).delete()
    daily_rollups(tenant=world.team_c, cluster=world.a100, flavor=world.a100_gpu, peaks=[0, 5])
    [lone] = [s for s in suggestions_compute(tenant=world.team_c) if s.cluster == world.a100]
    assert lone.request is None and "no lead" in lone.note
    assert Suggestion.objects.filter(tenant=world.team_c, cluster=world.a100).count() == 1


def test_no_readings_leave_a_line_alone_but_a_month_of_zeros_gives_the_guarantee_back(
    world: World,
) -> None:
    # demo-h100 has no readings for team-a at all (no collector there): nothing to suggest.
    daily_rollups(tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu, peaks=[0] * 28)
    by_cluster = {s.cluster: s for s in suggestions_compute(tenant=world.team_a)}
    unread = by_cluster[world.h100]
    assert unread.request is None and unread.note.startswith("No change")
    [line] = [n for n in unread.numbers if n["flavor"] == world.h100_gpu.name]
    assert (line["guaranteed_after"], line["limit_after"]) == (
        line["guaranteed_before"],
        line["limit_before"],
    )
    assert "no use of this flavor was recorded" in line["notes"][0]
    # On demo-a100 the readings say zero every day: the guarantee goes back (R20).
    idle = by_cluster[world.a100]
    [a100] = [n for n in idle.numbers if n["resource"] == GPU_RESOURCE]
    assert a100["days_with_usage"] == 0 and len(a100["daily_peaks"]) == 28
    assert (a100["guaranteed_before"], a100["guaranteed_after"]) == (6, 0)
    assert idle.request is not None and idle.request.status == RequestStatus.DRAFT


def test_the_monthly_run_leaves_archived_tenants_out(world: World) -> None:
    from advice.services import suggestions_compute_all
    from tenants.services import tenant_archive

    for tenant in (world.team_a, world.team_b):
        daily_rollups(tenant=tenant, cluster=world.a100, flavor=world.a100_gpu, peaks=TEAM_A_PEAKS)
    tenant_archive(tenant=world.team_b, actor=world.admin)
    suggestions_compute_all()
    computed = set(Suggestion.objects.values_list("tenant__slug", flat=True))
    assert "team-a" in computed
    assert "team-b" not in computed  # it would get no new quotas: no draft to file


def test_a_limit_already_at_the_elastic_cap_is_not_said_to_rise(world: World) -> None:
    # team-a 6/10 on demo-a100 peaked at its limit of 10, which is the elastic cap (62.5% of
    # 16): the limit stays 10 and the note says it cannot go higher, in whole numbers.
    daily_rollups(
        tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu,
        peaks=[4, 10, 8], utilization=75,
    )  # fmt: skip
    [suggestion] = [
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.a100
    ]  # fmt: skip
    [line] = [n for n in suggestion.numbers if n["resource"] == GPU_RESOURCE]
    assert (line["limit_before"], line["limit_after"], line["elastic_cap"]) == (10, 10, 10)
    notes = " ".join(line["notes"])
    assert "the peak reached the limit of 10, which is already the elastic cap" in notes
    assert "limit up to the elastic cap" not in notes
    assert "10.000" not in notes


def test_low_utilisation_does_not_raise_the_guarantee(world: World) -> None:
    # team-a 6/10 on demo-a100 peaked at 9 (80% -> 8) but its GPUs ran at 18.9% on average,
    # and with no memory readings no smaller flavor can be shown to fit: R8 wins over R19,
    # the guarantee stays 6 and the notes say why; nothing else changes, nothing is filed.
    daily_rollups(
        tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu,
        peaks=TEAM_A_PEAKS, utilization=18.9,
    )  # fmt: skip
    [suggestion] = [
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.a100
    ]  # fmt: skip
    [line] = [n for n in suggestion.numbers if n["resource"] == GPU_RESOURCE]
    assert line["guarantee_floor"] == 8
    assert (line["guaranteed_before"], line["guaranteed_after"]) == (6, 6)
    assert line["memory_first"] is None
    notes = " ".join(line["notes"])
    assert "mean utilisation 18.9% is below 40%" in notes
    assert "the guarantee stays at 6 rather than rising to 8" in notes
    assert suggestion.request is None and suggestion.note.startswith("No change")


def test_the_limit_stays_within_the_department_cap(world: World) -> None:
    # team-a and team-b (4/6 each on demo-h100) are teams of the department research, which
    # caps their H100 limits at 13. team-a peaked at its limit of 6: the elastic cap (8 of
    # 16) would allow 8, but team-b's 6 leaves research room for 7 only; the draft asks 7
    # and is filed (it was refused as "Not filed" before).
    from tests.conftest import seed_quota
    from tests.factories import TenantFactory

    research = TenantFactory(slug="research")
    for team in (world.team_a, world.team_b):
        team.parent = research
        team.save(update_fields=["parent"])
    seed_quota(research, world.h100, world.h100_gpu, 0, 13, actor=world.admin)
    daily_rollups(
        tenant=world.team_a, cluster=world.h100, flavor=world.h100_gpu,
        peaks=[3, 6, 5], utilization=70,
    )  # fmt: skip
    [suggestion] = [
        s for s in suggestions_compute(tenant=world.team_a, actor=world.alice)
        if s.cluster == world.h100
    ]  # fmt: skip
    line = next(n for n in suggestion.numbers if n["flavor"] == world.h100_gpu.name)
    assert (line["limit_before"], line["limit_after"], line["elastic_cap"]) == (6, 7, 8)
    assert any("the department research leaves room for a limit of 7" in n for n in line["notes"])
    assert suggestion.request is not None, suggestion.note
    items = {(i.flavor, i.resource): i.limit for i in suggestion.request.items.all()}
    assert items[(world.h100_gpu, GPU_RESOURCE)] == Decimal(7)
