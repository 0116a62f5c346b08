"""Every main page in a real browser at a phone's width (390 x 844) and a laptop's (1366 x 768):
the page never scrolls sideways (wide tables scroll inside their own box), the navigation and
"Log out" stay reachable, and axe-core finds no accessibility violation of serious or critical
impact (unlabelled form controls, contrast, landmarks, link names, ...).

axe-core comes from npm (package.json, pinned in package-lock.json; ``make node_modules``
installs it) and is injected from disk into each page, so nothing downloads while the tests run.
Its absence skips these tests locally and fails them in CI (``REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.conf import settings

from alerts.models import AlertRule
from approvals.services import quota_request_create
from gpu_agent.models import Gpu, MigInstance
from gpu_agent.services import layouts
from quotas.choices import GPU_RESOURCE
from quotas.services import QuotaItem
from tests.conftest import World, require_service
from tests.dashboards.data import write_usage_data
from tests.e2e.conftest import Browsing
from tests.gpu_agent.test_fleet_pages import BUSY_3G, add_node, gpu
from tests.pages import fire

pytestmark = [pytest.mark.e2e]

AXE = Path(settings.BASE_DIR) / "node_modules" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 768}
WIDTHS = [PHONE, LAPTOP]
SCREENSHOT = "/tmp/e2e-a11y-{who}-{width}-{n}.png"  # noqa: S108 - a fixed place a person can open
UUID = "GPU-gpu-node-1-0000"
LONG_LAYOUT = [{"profile": "1g.10gb", "start": i} for i in range(7)]
# What an agent may answer for a layout it could not apply: long, with long words (the fleet
# page's "Desired layout" cell used to push its table out of the card at 1366 px).
LONG_FAILURE = (
    "nvidia-smi mig -cgi 19,19,19,19,19,19,19 -C failed on GPU-gpu-node-1-0002: "
    "Unable to create a GPU instance on GPU 2 using profile 19: In use by another client; "
    "/var/lib/kubelet/device-plugins/nvidia-gpu.sock still holds MIG-7c2f1a4e-91d2-5b77-a0c3-"
    "6d1e2f3a4b5c and MIG-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
)


@dataclass
class Finding:
    path: str
    width: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path} at {self.width} px: {self.problem}"


AXE_URL = "/__axe-core__/axe.min.js"


def serve_axe(browsing: Browsing) -> None:
    """Answer ``AXE_URL`` on the portal's own origin from the file on disk: the page keeps its
    real Content-Security-Policy (``script-src 'self'``, no inline script), under which
    ``add_script_tag(path=...)``, an inline script, would be refused."""
    browsing.page.route(
        browsing.base_url + AXE_URL,
        lambda route: route.fulfill(path=str(AXE), content_type="text/javascript"),
    )


def axe_violations(browsing: Browsing) -> list[dict[str, Any]]:
    """axe-core's violations of serious or critical impact on the page as it is now."""
    page = browsing.page
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(url=browsing.base_url + AXE_URL)
    result = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations
              .filter(v => v.impact === 'serious' || v.impact === 'critical')
              .map(v => ({id: v.id, impact: v.impact, help: v.help,
                           nodes: v.nodes.map(n => ({target: n.target.join(' '),
                                                     summary: n.failureSummary,
                                                     html: n.html.slice(0, 160)}))}));
        }"""
    )
    return list(result)


def readable(violation: dict[str, Any]) -> str:
    lines = [f"{violation['impact']} {violation['id']}: {violation['help']}"]
    for node in violation["nodes"][:6]:
        summary = " ".join(node["summary"].split())
        lines.append(f"    {node['target']}  {node['html']}\n      {summary}")
    if len(violation["nodes"]) > 6:
        lines.append(f"    ... and {len(violation['nodes']) - 6} more")
    return "\n".join(lines)


def horizontal_overflow(page: Any) -> str | None:
    """None when the page fits the window's width; else its width and what sticks out."""
    fits = page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth")
    if fits:
        return None
    culprits = page.evaluate(
        """() => {
            const w = window.innerWidth, out = [];
            for (const e of document.body.querySelectorAll('*')) {
                const r = e.getBoundingClientRect();
                if (r.right > w + 1 && !(e.parentElement && e.parentElement.closest('.table-scroll'))) {
                    out.push(e.tagName.toLowerCase() + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\\s+/).join('.') : '') + ' (' + Math.round(r.right) + ' px)');
                }
            }
            return out.slice(0, 8);
        }"""
    )
    width = page.evaluate("() => document.scrollingElement.scrollWidth")
    return f"the page is {width} px wide, wider than the window; sticking out: {culprits}"


def tables_wider_than_their_box(page: Any) -> list[str]:
    """The tables on the page that scroll inside their box: wider than the box they are in."""
    return list(
        page.eval_on_selector_all(
            ".table-scroll",
            """els => els.filter(e => e.scrollWidth > e.clientWidth + 1)
                        .map(e => e.firstElementChild.className + ' (' + e.scrollWidth + ' px in '
                                  + e.clientWidth + ' px)')""",
        )
    )


def check_pages(browsing: Browsing, who: str, paths: list[str | tuple[str, int]]) -> list[Finding]:
    """Each of ``paths`` (or ``(path, expected status)``) at each width: what is wrong."""
    findings: list[Finding] = []
    page = browsing.page
    serve_axe(browsing)
    for width in WIDTHS:
        page.set_viewport_size(width)
        for n, entry in enumerate(paths):
            path, status = entry if isinstance(entry, tuple) else (entry, 200)
            before = len(findings)
            browsing.goto(path, status=status)
            page.wait_for_load_state("load")
            overflow = horizontal_overflow(page)
            if overflow:
                findings.append(Finding(path, width["width"], overflow))
            for violation in axe_violations(browsing):
                findings.append(Finding(path, width["width"], readable(violation)))
            if len(findings) > before:
                page.screenshot(
                    path=SCREENSHOT.format(who=who, width=width["width"], n=n), full_page=True
                )
    return findings


def report(findings: list[Finding]) -> str:
    return f"{len(findings)} problem(s):\n" + "\n".join(str(f) for f in findings)


@pytest.fixture
def axe() -> Path:
    require_service("axe-core", AXE.is_file(), f"{AXE} is missing: run `make node_modules`")
    return AXE


@pytest.fixture
def pages_world(live_world: World) -> dict[str, str]:
    """What the main pages show when they have something to show: usage, a firing alert, a
    pending request, a GPU node with MIG instances and a long desired layout."""
    world = live_world
    if not AlertRule.objects.exists():  # a data migration, flushed after transactional tests
        importlib.import_module("alerts.migrations.0002_default_rules").seed(django_apps, None)
    write_usage_data(world)
    alert = fire(world.team_a, world.a100_gpu)
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="bigger training runs",
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(8), Decimal(10))],
        submit=True,
    )
    node = add_node(
        world.admin,
        "gpu-node-1",
        [gpu("gpu-node-1", 0, instances=BUSY_3G), gpu("gpu-node-1", 1), gpu("gpu-node-1", 2)],
    )
    MigInstance.objects.filter(gpu__uuid=UUID, gi_id=1).update(tenant=world.team_a)
    layouts.layout_set(
        gpu=Gpu.objects.get(uuid="GPU-gpu-node-1-0002"), instances=LONG_LAYOUT, actor=world.admin
    )
    layouts.agent_result(
        node=node, uuid="GPU-gpu-node-1-0002", generation=1, state="failed", message=LONG_FAILURE
    )
    return {"alert": f"/alerts/{alert.pk}/", "request": f"/requests/{request.pk}/"}


def test_a_lead_pages_fit_a_phone_and_a_laptop_and_pass_axe(
    axe: Path, pages_world: dict[str, str], browse: Any
) -> None:
    alice = browse()
    alice.log_in("alice")
    paths: list[str | tuple[str, int]] = [
        "/",
        "/tenants/team-a/",
        "/tenants/team-a/requests/new/?cluster=demo-a100",
        pages_world["request"],
        "/requests/",
        "/tenants/team-a/usage/?range=7d",
        "/tenants/team-a/profile/",
        "/tenants/team-a/showback/",
        "/tenants/team-a/clusters/demo-a100/",
        "/alerts/",
        pages_world["alert"],
        "/inbox/",
    ]
    findings = check_pages(alice, "alice", paths)
    assert not findings, report(findings)


def test_a_member_pages_fit_and_pass_axe(
    axe: Path, pages_world: dict[str, str], browse: Any
) -> None:
    carol = browse()
    carol.log_in("carol")
    paths: list[str | tuple[str, int]] = [
        "/",
        "/tenants/team-a/",
        "/alerts/",
        ("/tenants/team-a/requests/new/?cluster=demo-a100", 403),  # a member files nothing
        ("/tenants/team-b/", 404),
    ]
    findings = check_pages(carol, "carol", paths)
    assert not findings, report(findings)


def test_admin_pages_fit_and_pass_axe(axe: Path, pages_world: dict[str, str], browse: Any) -> None:
    admin = browse()
    admin.log_in("admin")
    paths: list[str | tuple[str, int]] = [
        "/",
        "/console/",
        "/console/approvals/",
        pages_world["request"],
        "/fleet/",
        f"/fleet/gpus/{UUID}/",
        "/fleet/gpus/GPU-gpu-node-1-0002/",
        "/fleet/plan/",
        "/clusters/demo-a100/",
        "/usage/?range=7d",
        "/showback/",
        "/alerts/",
        "/admin/",
        "/admin/tenants/tenant/",
    ]
    findings = check_pages(admin, "admin", paths)
    assert not findings, report(findings)


def test_the_fleet_tables_fit_their_cards_at_a_laptops_width(
    pages_world: dict[str, str], browse: Any
) -> None:
    """A long agent message in "Desired layout" wraps in its cell instead of widening the table
    past its node's card (where it would have to scroll)."""
    admin = browse()
    admin.page.set_viewport_size(LAPTOP)
    admin.log_in("admin")
    admin.goto("/fleet/")
    assert LONG_FAILURE[:40] in admin.page.inner_text("table.fleet-gpus")
    assert tables_wider_than_their_box(admin.page) == []


def test_the_login_page_fits_and_passes_axe(axe: Path, live_world: World, browse: Any) -> None:
    visitor = browse()
    findings = check_pages(visitor, "anonymous", ["/login/"])
    assert not findings, report(findings)


@pytest.mark.parametrize("width", WIDTHS, ids=["phone", "laptop"])
def test_log_out_is_reachable_at_every_width(live_world: World, browse: Any, width: Any) -> None:
    alice = browse()
    alice.page.set_viewport_size(width)
    alice.log_in("alice")
    page = alice.page
    log_out = page.get_by_role("button", name="Log out")
    assert log_out.is_visible()
    box = log_out.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width["width"]
    # The navigation: on a phone behind "Menu", open on a laptop.
    alerts = page.get_by_role("navigation").get_by_role("link", name="Alerts")
    if width is PHONE:
        assert not alerts.is_visible()
        page.get_by_text("Menu", exact=True).click()
    assert alerts.is_visible()
    with page.expect_navigation():
        log_out.click()
    assert "/login/" in page.url
