"""The MIG planner run by Celery beat: its proposal per cluster stored only when it changed,
shown on /fleet/plan/ with its age, applied only after a confirmation, and refused when the
GPUs changed since it was made."""

from __future__ import annotations

import re
from decimal import Decimal

from django.utils import timezone

from gpu_agent import tasks
from gpu_agent.models import MigLayout, Node, PlanProposal
from gpu_agent.services import proposals
from portal.celery import app
from quotas.models import Quota, QuotaSet
from tests.gpu_agent.test_fleet_pages import H100, PLAN, add_node, gpu, instance, words
from tests.pages import logged_in, main, text

GPU = "GPU-h100-node-0000"


def _h100_with_demand(world) -> Node:
    """An empty H100 on demo-h100; team-a guaranteed 3 x 1g.10gb there."""
    node = add_node(world.admin, "h100-node", [gpu("h100-node", 0, name=H100)])
    Node.objects.filter(pk=node.pk).update(cluster=world.h100)
    Quota.objects.create(
        quota_set=QuotaSet.objects.get(tenant=world.team_a, cluster=world.h100),
        flavor=world.h100_mig,
        resource="nvidia.com/mig-1g.10gb",
        guaranteed=Decimal(3),
        limit=Decimal(4),
    )
    return node


def test_beat_runs_the_planner_and_stores_a_proposal_only_when_it_changed(world):
    assert app.conf.beat_schedule["gpu-agent-refresh-plan-proposals"]["task"] == (
        "gpu_agent.tasks.refresh_plan_proposals"
    )
    assert tasks.refresh_plan_proposals() == 0  # no cluster has GPU nodes yet
    _h100_with_demand(world)
    assert tasks.refresh_plan_proposals() == 1
    proposal = PlanProposal.objects.get()
    assert proposal.cluster == world.h100
    (planned,) = proposal.gpus
    assert planned["uuid"] == GPU and planned["changed"] is True
    assert [i["profile"] for i in planned["create"]] == ["1g.10gb"] * 3
    assert proposal.demand == [
        {"profile": "1g.10gb", "count": 3, "tenant": "team-a", "model": H100}
    ]
    assert proposal.explanation and proposal.unmet == []
    first_check = proposal.checked_at

    assert tasks.refresh_plan_proposals() == 0  # unchanged: not stored again
    assert PlanProposal.objects.count() == 1
    assert PlanProposal.objects.get().checked_at > first_check

    Quota.objects.filter(resource="nvidia.com/mig-1g.10gb").update(guaranteed=Decimal(4))
    assert tasks.refresh_plan_proposals() == 1
    assert PlanProposal.objects.count() == 2


def test_the_page_shows_the_proposal_and_applies_it_after_a_confirmation(world):
    _h100_with_demand(world)
    tasks.refresh_plan_proposals()
    proposal = PlanProposal.objects.get()
    client = logged_in(world.admin)
    page = main(client.get(PLAN))
    article = re.search(rf'<article[^>]*data-proposal="{proposal.pk}".*?</article>', page, re.S)
    assert article, "no stored proposal on the page"
    shown = words(article.group(0))
    assert "demo-h100" in shown and "made 0 s ago" in shown
    assert "1g.10gb@" in shown and "Apply…" in shown

    url = f"/fleet/plan/proposals/{proposal.pk}/"
    confirm = client.post(url)
    assert confirm.status_code == 200 and "data-confirm" in text(confirm)
    assert not MigLayout.objects.exists()  # nothing before the confirmation
    done = client.post(url, {"confirm": "yes"}, follow=True)
    assert f"Proposal {proposal.pk} applied to 1 GPU" in text(done)
    layout = MigLayout.objects.get()
    assert layout.gpu.uuid == GPU and [i["profile"] for i in layout.instances] == ["1g.10gb"] * 3
    assert layout.requested_by == world.admin

    # The desired layout changed the GPUs' state: the same proposal is stale now.
    again = client.post(url, {"confirm": "yes"})
    assert again.status_code == 409
    assert "is stale" in text(again) and "Nothing was applied" in text(again)
    assert MigLayout.objects.count() == 1


def test_a_proposal_whose_gpus_changed_is_refused_and_marked_stale(world):
    node = _h100_with_demand(world)
    tasks.refresh_plan_proposals()
    proposal = PlanProposal.objects.get()
    # The agent reports a new instance with a process: the plan was made without it.
    add_node_report = [gpu("h100-node", 0, name=H100, instances=[instance(1, "3g.40gb", 0, 4, 7)])]
    from gpu_agent.services import reports

    reports.agent_report_ingest(
        node=node,
        report={
            "node": "h100-node",
            "sent_at": "2026-12-03T08:00:00Z",
            "agent_version": "1.0",
            "driver_version": "580.65.06",
            "gpus": add_node_report,
        },
    )
    reason = proposals.plan_proposal_stale_reason(proposal=proposal)
    assert reason.startswith("the GPUs changed since it was made")
    client = logged_in(world.admin)
    article = re.search(
        r"<article[^>]*data-stale-proposal.*?</article>", main(client.get(PLAN)), re.S
    )
    assert article and "Apply…" not in article.group(0)
    response = client.post(f"/fleet/plan/proposals/{proposal.pk}/", {"confirm": "yes"})
    assert response.status_code == 409 and not MigLayout.objects.exists()
    assert logged_in(world.alice).post(f"/fleet/plan/proposals/{proposal.pk}/").status_code == 403
    assert client.post("/fleet/plan/proposals/999999/").status_code == 404


def test_the_latest_list_has_the_newest_proposal_of_each_cluster_and_of_none(world):
    """One row per cluster, the newest (and one for GPUs of nodes without a cluster), on
    SQLite as on PostgreSQL."""

    def stored(cluster):
        now = timezone.now()
        return PlanProposal.objects.create(
            cluster=cluster, checked_at=now, digest="d", state_digest="s"
        )

    stored(world.a100), stored(world.h100), stored(None)
    newest = [stored(world.a100), stored(world.h100), stored(None)]

    latest = proposals.plan_proposal_latest_list(user=world.admin)

    assert sorted(p.pk for p in latest) == sorted(p.pk for p in newest)
    assert proposals.plan_proposal_latest_list(user=world.alice) == []


def test_gpus_with_mig_disabled_are_one_line_of_a_proposal_not_one_each(world):
    _h100_with_demand(world)
    for n in range(3):
        node = add_node(
            world.admin, f"h100-whole-{n}",
            [gpu(f"h100-whole-{n}", i, name=H100, mig=False) for i in range(8)],
        )  # fmt: skip
        Node.objects.filter(pk=node.pk).update(cluster=world.h100)
    tasks.refresh_plan_proposals()
    proposal = PlanProposal.objects.get()

    page = words(main(logged_in(world.admin).get(PLAN)))
    assert page.count("MIG is disabled") == 1, page
    assert (
        f"24 GPUs ({H100} on h100-whole-0, h100-whole-1, h100-whole-2): MIG is disabled; "
        "left as they are" in page
    )
    assert len([line for line in proposal.explanation if "MIG is disabled" in line]) == 1
