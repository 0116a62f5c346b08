"""The demo's simulated month adds up (``manage.py demo``): no tenant runs more GPUs than its
limit, no cluster more than its capacity, a department's teams stay under its cap, and the
three views of the same month agree for each tenant: the workload profile's peak concurrency,
the tenant's usage page and the fleet's usage dashboard."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import TestCase
from django.utils import timezone

from dashboards import selectors as dashboards
from dashboards.selectors import _peak_concurrent
from quotas.choices import is_gpu_resource
from quotas.models import Cluster, FlavorResource, Quota, ResourceFlavor
from quotas.selectors import flavor_capacities
from tenants.models import Tenant, User
from tests.pages import logged_in
from usage.choices import Metric, Resolution
from usage.models import Rollup, Sample, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def _demo_once(django_db_setup: None, django_db_blocker: Any) -> Iterator[datetime]:
    """``manage.py demo`` (~5 s) once for the module, as ``TestCase.setUpTestData`` does: in a
    transaction rolled back when the module is done. Each test runs in a savepoint inside it
    (the ``db`` fixture), so what one test writes (a node, its agent's report) is gone before
    the next one starts. Every test of this module reads the demo: one that does not (the
    ``world`` fixture, say) would find the demo's rows there all the same."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic._from_testcase = True  # type: ignore[attr-defined] # as TestCase marks its own
        atomic.__enter__()
        try:
            call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 - closed with the process
            yield timezone.now()
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture
def demo(_demo_once: datetime, db: None) -> datetime:
    return _demo_once


def _gpu_limits() -> dict[tuple[int, int, int], float]:
    return {
        (q.quota_set.cluster_id, q.quota_set.tenant_id, q.flavor_id): float(q.limit)
        for q in Quota.objects.select_related("quota_set")
        if is_gpu_resource(q.resource)
    }


def _running() -> dict[tuple[int, int, int], list[tuple[datetime, datetime, float]]]:
    """Per (cluster, tenant, flavor): the admitted workloads' runs (to now when running)."""
    now = timezone.now()
    flavor_ids = {(f.cluster_id, f.name): f.pk for f in ResourceFlavor.objects.all()}
    runs: dict[tuple[int, int, int], list[tuple[datetime, datetime, float]]] = defaultdict(list)
    for w in Workload.objects.filter(admitted_at__isnull=False):
        key = (w.cluster_id, w.tenant_id, flavor_ids[(w.cluster_id, w.flavors[0])])
        runs[key].append((w.admitted_at, w.finished_at or now, w.gpus))
    return runs


def test_no_simulated_step_exceeds_a_limit_a_cap_or_the_cluster(demo: datetime) -> None:
    limits = _gpu_limits()
    capacities = {
        flavor: float(capacity.amount)
        for cluster in Cluster.objects.all()
        for (flavor, resource), capacity in flavor_capacities(cluster=cluster).items()
        if is_gpu_resource(resource)
    }
    # The month's hourly figures: no tenant's busiest step above its limit.
    hourly = Rollup.objects.filter(metric=Metric.QUOTA_USED, resolution=Resolution.HOUR)
    assert hourly.count() > 24 * 28
    for cluster, tenant, flavor, peak in hourly.values_list(
        "cluster_id", "tenant_id", "flavor_id", "max"
    ):
        assert peak <= limits[(cluster, tenant, flavor)]
    # The workloads behind them, over the whole month: each tenant within its limit, each
    # cluster's GPU flavor within its capacity.
    runs = _running()
    per_flavor: dict[int, list[tuple[datetime, datetime, float]]] = defaultdict(list)
    for (_cluster, _tenant, flavor), intervals in runs.items():
        per_flavor[flavor] += intervals
    for key, intervals in runs.items():
        assert _peak_concurrent(intervals) <= limits[key], key
    for flavor, intervals in per_flavor.items():
        assert _peak_concurrent(intervals) <= capacities[flavor], flavor
    # The raw steps still kept: the tenants together within each flavor's capacity.
    together: dict[tuple[int, datetime], float] = defaultdict(float)
    for time, flavor, value in Sample.objects.filter(metric=Metric.QUOTA_USED).values_list(
        "time", "flavor_id", "value"
    ):
        together[(flavor, time)] += value
    assert together
    for (flavor, _time), value in together.items():
        assert value <= capacities[flavor]
    # The Research department caps team-a and team-b together on demo-h100 (12 H100s).
    research = Tenant.objects.get(slug="research")
    cap = next(
        q for q in Quota.objects.filter(quota_set__tenant=research) if is_gpu_resource(q.resource)
    )
    children = set(research.children.values_list("pk", flat=True))
    assert len(children) == 2
    teams = [
        run
        for (_cluster, tenant, flavor), intervals in runs.items()
        if flavor == cap.flavor_id and tenant in children
        for run in intervals
    ]
    assert teams and _peak_concurrent(teams) <= float(cap.limit)
    # A department's quota is a pool for its teams: it runs no work of its own.
    assert not Workload.objects.filter(tenant=research).exists()
    assert not hourly.filter(tenant_id=research.pk).exists()


def test_the_profile_the_usage_page_and_the_fleet_agree(demo: datetime) -> None:
    period = dashboards.period_resolve(name="30d", now=demo)
    fleet = dashboards.admin_dashboard(period=period, now=demo)
    limits = _gpu_limits()
    running = _running()
    flavor_names = {
        f.pk: (f.cluster.name, f.name) for f in ResourceFlavor.objects.select_related("cluster")
    }
    checked = 0
    for tenant in Tenant.objects.filter(namespaces__isnull=False).distinct():
        profile = dashboards.workload_profile(tenant=tenant, period=period)
        page = dashboards.tenant_dashboard(tenant=tenant, period=period)
        own_limits = {k: v for k, v in limits.items() if k[1] == tenant.pk}
        if not Workload.objects.filter(tenant=tenant).exists():
            # A team that joined after the simulated month (the time-sliced labs): nothing
            # drawn anywhere, nothing claimed.
            assert profile.peak_concurrent_gpus == 0, tenant.slug
            assert all(f.peak_used in (None, 0) for f in profile.flavors), tenant.slug
            continue
        # The profile's peak: never above what the tenant's limits allow together, and at
        # least the busiest step of each flavor its usage page drew.
        assert profile.peak_concurrent_gpus <= sum(own_limits.values()), tenant.slug
        peaks = [f.peak_used for f in profile.flavors if f.peak_used is not None]
        assert peaks and profile.peak_concurrent_gpus >= max(peaks) > 0, tenant.slug
        for flavor_profile in profile.flavors:
            assert flavor_profile.peak_used is not None
            key = next(
                k
                for k in own_limits
                if flavor_names[k[2]] == (flavor_profile.cluster, flavor_profile.flavor)
            )
            assert flavor_profile.peak_used <= own_limits[key]
        # Per flavor, the workloads never run more at once than the tenant's limit there.
        for key, intervals in running.items():
            if key[1] == tenant.pk:
                assert _peak_concurrent(intervals) <= own_limits[key], (tenant.slug, key)
        # The usage page and the fleet read the same month: the fleet's mean use of each
        # flavor by this tenant is the mean of the tenant's own samples.
        drawn = {
            (series.cluster, series.flavor): [
                p.values["used"] for p in series.points if p.values.get("used") is not None
            ]
            for series in page.series
        }
        for view in fleet.clusters:
            for flavor_id, shares in view.shares.items():
                if tenant.slug in shares:
                    mine = drawn[flavor_names[flavor_id]]
                    assert shares[tenant.slug] == pytest.approx(sum(mine) / len(mine), rel=0.02)
                    checked += 1
        # Utilisation: the tenant's page shows what the fleet averages, on every cluster.
        for view in fleet.clusters:
            here = dashboards.tenant_dashboard(
                tenant=tenant, period=period, cluster=view.cluster.name
            ).indicators.mean_gpu_utilization
            if here:
                assert view.utilization is not None and view.utilization > 0
        assert page.indicators.mean_gpu_utilization is not None
    assert checked >= 6  # three teams on two clusters
    # The fleet's utilisation of a cluster lies among its tenants' (a mean of their series).
    for view in fleet.clusters:
        pages = [
            dashboards.tenant_dashboard(
                tenant=t, period=period, cluster=view.cluster.name
            ).indicators.mean_gpu_utilization
            for t in Tenant.objects.filter(namespaces__isnull=False).distinct()
        ]
        seen = [p for p in pages if p is not None]
        assert view.utilization is not None
        assert min(seen) - 0.5 <= view.utilization <= max(seen) + 0.5
    # The usage dashboard's page shows each cluster's utilisation over the same month.
    admin = logged_in(User.objects.get(username="admin"))
    html = admin.get("/usage/?range=30d").content.decode()
    for view in fleet.clusters:
        row = html[html.index(f'<tr data-cluster="{view.cluster.name}">') :].split("</tr>")[0]
        cell = row[row.index("data-utilization>") :].split("</td>")[0]
        assert f"{view.utilization:.0f} %" in cell and view.utilization > 0


def test_the_demo_mig_flavors_have_the_capacity_the_seeded_layouts_hold(demo: datetime) -> None:
    """demo-h100's MIG nodes start partitioned: once their (fake) agents report and the
    cluster's Node objects (what the demo puts in its stand-ins) confirm them, the fleet
    counts instances of each MIG flavor's profile, the number the demo entered, and the
    usage dashboard shows the same capacity the approval check reads."""
    from gpu_agent.models import Node
    from gpu_agent.services.cluster_nodes import cluster_nodes_record
    from gpu_agent.services.reports import agent_report_ingest
    from gpu_node_agent.runner import Agent, AgentState
    from gpu_node_agent.testing.fake import build_fake_node
    from portal.management.commands.demo import DEMO_NODES, standin_node

    h100 = Cluster.objects.get(name="demo-h100")
    mig = {
        f.pk: f for f in ResourceFlavor.objects.filter(cluster=h100, kind="mig").order_by("name")
    }
    entered = {
        (fr.flavor_id, fr.resource): fr.capacity
        for fr in FlavorResource.objects.filter(flavor_id__in=list(mig))
    }
    assert all(amount > 0 for amount in entered.values()) and len(entered) == 2
    for name, cluster_name, spec in DEMO_NODES:
        if cluster_name != h100.name:
            continue
        fake = build_fake_node(spec, state_path=None, seed=name)
        agent = Agent(
            backend=fake.backend,
            client=None,  # type: ignore[arg-type] - inventory() talks to no portal
            state=AgentState(None),
            node=name,
            pod_lookup=fake.pod_uid_for_pid,
        )
        node = Node.objects.create(name=name, cluster=h100, last_report_at=timezone.now())
        # Its MIG capacity reaches quotas once the report commits: run what waits for it.
        with TestCase.captureOnCommitCallbacks(execute=True):
            agent_report_ingest(node=node, report=agent.inventory())
    # The cluster's word: the Node objects the demo seeds its stand-in with.
    seeded = [standin_node(name, spec) for name, c, spec in DEMO_NODES if c == h100.name]
    cluster_nodes_record(cluster=h100, objects=[n for n in seeded if n is not None])
    # The labs' T4 (vGPU shares through HAMi) is a GPU two tenants share: the isolation page
    # offers its check.
    from gpu_agent.services.probes import shared_gpus

    assert [(r.gpu.node.name, r.how, [t.slug for t in r.tenants]) for r in shared_gpus()] == [
        ("t4-node-1", "vgpu", ["lab-nlp", "lab-speech", "lab-vision"])
    ]
    checked = flavor_capacities(cluster=h100)
    period = dashboards.period_resolve(name="24h")
    shown = {
        f.flavor.pk: f.capacity
        for c in dashboards.admin_dashboard(period=period, cluster=h100.name).clusters
        for f in c.flavors
    }
    for key, amount in entered.items():
        capacity = checked[key]
        assert capacity.fleet is not None and capacity.fleet.observed == amount  # the fleet's
        assert shown[key[0]] == float(capacity.amount) == float(amount)


def test_team_b_is_capped_at_1g_per_pod_by_an_approved_request(demo: datetime) -> None:
    """R27 in the demo: team-b's lead asked for a per-pod bandwidth cap and an admin approved
    it; team-b's page names it, team-a's says there is none."""
    assert dict(Tenant.objects.values_list("slug", "pod_bandwidth_max")) == {
        slug: ("1G" if slug == "team-b" else "")
        for slug in Tenant.objects.values_list("slug", flat=True)
    }
    bob = logged_in(User.objects.get(username="bob"))
    page = bob.get("/tenants/team-b/").content.decode()
    assert "Pod bandwidth: <strong>at most 1 Gbit/s each way per pod</strong>" in page
    alice = logged_in(User.objects.get(username="alice"))
    assert (
        "Pod bandwidth: <strong>no cap</strong>" in alice.get("/tenants/team-a/").content.decode()
    )


def test_the_simulated_gpus_tell_the_story_of_the_tenants_usage(
    demo: datetime, tmp_path: Any
) -> None:
    """The demo's node agents (fake backend) carry the demo's load plan: on demo-a100 the
    GPUs team-a holds (the busy tenant of the simulated month and of the simulated Kueue) show
    on the heatmap at the level of team-a's usage page, team-b's (its idle notebook) at 0 %,
    and the cluster's heatmap is no longer all idle."""
    from gpu_agent.models import Node
    from gpu_agent.services.reports import agent_report_ingest
    from gpu_node_agent.runner import Agent, AgentState
    from gpu_node_agent.testing.fake import build_fake_node
    from gpu_spec import demo_load
    from portal.management.commands.demo import DEMO_NODES, demo_load_plan

    plan = demo_load_plan()
    a100 = next(c for c in plan.clusters if c.name == "demo-a100")
    assert a100.nodes == (("a100-node-1", 8), ("a100-node-2", 8))
    assert all(t.utilisation_pct for t in a100.tenants if not t.idle)
    assert [(t.name, t.limit, t.hot, t.idle) for t in a100.tenants] == [
        ("team-a", 10, True, False),
        ("team-b", 6, False, True),
        ("team-c", 4, False, False),
    ]
    h100 = next(c for c in plan.clusters if c.name == "demo-h100")
    assert h100.nodes == (("h100-node-1", 8), ("h100-node-2", 8))
    assert h100.tenants and all(not t.idle for t in h100.tenants)
    path = tmp_path / demo_load.DEMO_LOAD_PLAN_FILE
    demo_load.write_load_plan(path, plan)

    now = timezone.now()
    cluster = Cluster.objects.get(name="demo-a100")
    for name, cluster_name, spec in DEMO_NODES:
        if cluster_name != cluster.name:
            continue
        fake = build_fake_node(
            spec, state_path=None, seed=name, load_plan=path, clock=now.timestamp
        )
        agent = Agent(
            backend=fake.backend,
            client=None,  # type: ignore[arg-type] - inventory() talks to no portal
            state=AgentState(None),
            node=name,
            pod_lookup=fake.pod_uid_for_pid,
        )
        node = Node.objects.create(name=name, cluster=cluster, last_report_at=now)
        with TestCase.captureOnCommitCallbacks(execute=True):
            agent_report_ingest(node=node, report=agent.inventory())

    view = dashboards.admin_dashboard(
        period=dashboards.period_resolve(name="24h", now=now), now=now, cluster=cluster.name
    ).clusters[0]
    heat = {(g.node, g.index): g.utilization for g in view.gpus}
    assert len(heat) == 16
    held = demo_load.held_gpus(a100, now)
    team_a = [heat[slot] or 0.0 for slot, t in held.items() if t.name == "team-a"]
    team_b = [heat[slot] for slot, t in held.items() if t.name == "team-b"]
    assert len(team_a) >= 8 and min(team_a) > 0
    assert team_b and set(team_b) == {0}
    # team-a's page for demo-a100 over its busy last week: the level its GPUs run at now.
    page = dashboards.tenant_dashboard(
        tenant=Tenant.objects.get(slug="team-a"),
        period=dashboards.period_resolve(name="7d", now=demo),
        cluster=cluster.name,
    ).indicators.mean_gpu_utilization
    assert page is not None
    # Each GPU within the plan's noise of that level (and rounded to a whole percent).
    assert sum(team_a) / len(team_a) == pytest.approx(page, abs=demo_load.NOISE_PCT + 0.5)


def test_team_a_holds_a_two_week_grant_of_extra_h100s(demo: datetime) -> None:
    """Issue 37 item 3 in the demo: team-a's lead asked for 2 more H100s for two weeks, an
    admin approved; the grant is in force (pushed, added to the standing quota the compiler
    is fed), ends in the demo's future, and the admins' time line shows it."""
    from quotas.choices import GrantState
    from quotas.loader import tenant_specs
    from quotas.models import Grant

    grant = Grant.objects.get(tenant__slug="team-a", cluster__name="demo-h100")
    assert grant.state == GrantState.ACTIVE
    days = (grant.ends_at - timezone.now()).total_seconds() / 86400
    assert 13 < days <= 14
    standing = Quota.objects.get(
        quota_set__tenant=grant.tenant,
        quota_set__cluster=grant.cluster,
        flavor__name="h100-80gb",
        resource="nvidia.com/gpu",
    )
    (spec,) = tenant_specs(grant.cluster, tenant_ids=[grant.tenant_id])
    (line,) = [q for q in spec.quotas if q.flavor == "h100-80gb" and q.resource == "nvidia.com/gpu"]
    assert (line.guaranteed, line.limit) == (standing.guaranteed + 2, standing.limit + 2)
    admin = logged_in(User.objects.get(username="admin"))
    page = admin.get("/console/grants/").content.decode()
    assert "team-a" in page and "demo-h100" in page


def test_the_labs_vgpu_month_shows_their_memory_and_bob_finds_a_memory_first_suggestion(
    demo: datetime,
) -> None:
    """Issue 34 in the demo: the labs' shares of the HAMi T4 carry a month of GPU memory and
    compute use, each within its share; lab-nlp's usage page shows what it held in GiB, and bob, its lead, finds a suggestion that raises its GPU memory and
    keeps its compute low."""
    from advice.models import Suggestion
    from quotas.choices import GPUCORES_RESOURCE, GPUMEM_RESOURCE

    for slug in ("lab-nlp", "lab-vision", "lab-speech"):
        shares = {
            q.resource: float(q.limit)
            for q in Quota.objects.filter(
                quota_set__tenant__slug=slug, resource__in=[GPUMEM_RESOURCE, GPUCORES_RESOURCE]
            )
        }
        samples = Sample.objects.filter(tenant_id=Tenant.objects.get(slug=slug).pk)
        memory = list(
            samples.filter(metric=Metric.VGPU_MEMORY_USED).values_list("value", flat=True)
        )
        cores = list(samples.filter(metric=Metric.VGPU_CORES_USED).values_list("value", flat=True))
        assert memory and cores, slug
        assert max(memory) <= shares[GPUMEM_RESOURCE] / 1024**2  # MiB, within the share
        assert max(cores) <= shares[GPUCORES_RESOURCE]
    bob = logged_in(User.objects.get(username="bob"))
    page = bob.get("/tenants/lab-nlp/usage/?range=7d").content.decode()
    assert 'id="vgpu-shares"' in page
    # The vGPU table: the GPU memory its containers held, in GiB and as a part of the share.
    assert re.search(r"\d+(\.\d+)? GiB \(\d+% of the share\)", page)
    (suggestion,) = Suggestion.objects.filter(tenant__slug="lab-nlp")
    line = next(n for n in suggestion.numbers if n.get("vgpu"))
    assert line["vgpu"]["memory_first"] is True
    assert suggestion.request is not None and suggestion.request.requester.username == "bob"
