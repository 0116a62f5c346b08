"""The GPU fleet pages, with Django's test client: the fleet (nodes, GPUs, stale badge, a
constant number of queries), a GPU's layouts drawn as memory slices, the form that sets one
(rules, busy instances, drain) and its live check, and the MIG planner's proposal, applied
only after a confirmation. Fleet data comes in through the services, as an agent's report.

Every GPU here is an A100-SXM4-80GB (8 memory slices, 7 compute slices) unless it says H100.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.errors import Conflict
from gpu_agent.models import Gpu, LayoutState, MigInstance, MigLayout, Node
from gpu_agent.services import layouts, nodes, plans, reports
from gpu_spec.mig.planner import Demand
from quotas.models import Quota, QuotaSet
from tenants.models import User
from tests.conftest import World
from tests.pages import logged_in, main, text

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
FLEET = "/fleet/"
PLAN = "/fleet/plan/"
UUID = "GPU-gpu-node-1-0000"
GPU_PAGE = f"/fleet/gpus/{UUID}/"
LAYOUT = f"/fleet/gpus/{UUID}/layout/"
VALIDATE = f"/fleet/gpus/{UUID}/layout/validate/"


# --- fleet data, as agents report it -------------------------------------------------------


def instance(gi_id: int, profile: str, start: int, size: int, *pids: int) -> dict[str, Any]:
    return {
        "gi_id": gi_id,
        "profile": profile,
        "start": start,
        "size": size,
        "ci_ids": [0],
        "memory_used_mib": 512 if pids else 0,
        "utilization_pct": None,
        "processes": [
            {"pid": pid, "used_memory_mib": 500, "pod_uid": f"pod-{pid}"} for pid in pids
        ],
    }


def gpu(
    node: str,
    index: int,
    *,
    mig: bool = True,
    instances: list[dict[str, Any]] | None = None,
    name: str = A100,
) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index:04d}",
        "index": index,
        "name": name,
        "memory_total_mib": 81920,
        "memory_used_mib": 1024,
        "utilization_pct": None if mig else 37,
        "mig_mode_current": mig,
        "mig_mode_pending": mig,
        "applied_generation": 0,
        "instances": instances or [],
        "processes": [],
    }


def add_node(admin: User, name: str, gpus: list[dict[str, Any]]) -> Node:
    """Register ``name`` with a join token and ingest its agent's report."""
    _, join = nodes.join_token_create(node_name=name, actor=admin)
    node, _ = nodes.agent_register(join_secret=join, hostname=f"{name}.lab", agent_version="1.0")
    reports.agent_report_ingest(
        node=node,
        report={
            "node": name,
            "sent_at": "2026-12-03T08:00:00Z",
            "agent_version": "1.0",
            "driver_version": "580.65.06",
            "gpus": gpus,
        },
    )
    node.refresh_from_db()
    return node


BUSY_3G = [instance(1, "3g.40gb", 0, 4, 4242), instance(2, "1g.10gb", 5, 1)]


@pytest.fixture
def fleet(world: World) -> Node:
    """gpu-node-1: GPU 0 in MIG mode with a busy 3g.40gb at slices 0-3 (team-a's pod) and an
    idle 1g.10gb at slice 5; GPU 1 whole (MIG off, 37 % busy)."""
    node = add_node(
        world.admin,
        "gpu-node-1",
        [gpu("gpu-node-1", 0, instances=BUSY_3G), gpu("gpu-node-1", 1, mig=False)],
    )
    MigInstance.objects.filter(gpu__uuid=UUID, gi_id=1).update(tenant=world.team_a)
    return node


def words(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def section(html: str, marker: str) -> str:
    match = re.search(rf"<section\b[^>]*{re.escape(marker)}[^>]*>.*?</section>", html, re.S)
    assert match, f"no section with {marker}"
    return match.group(0)


def blocks(html: str) -> list[tuple[str, int, int, str]]:
    """(profile, start, size, kind) of every instance drawn, in order."""
    return [
        (profile, int(start), int(size), kind)
        for profile, start, size, kind in re.findall(
            r'data-profile="([^"]+)" data-start="(\d+)" data-size="(\d+)" data-kind="(\w+)"', html
        )
    ]


def free_cells(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'data-free-slice="(\d+)"', html)]


def slot(response: Any, name: str) -> str:
    """The messages shown in the error slot of input ``name``."""
    match = re.search(
        rf'data-error-for="{re.escape(name)}">(.*?)</div>', response.content.decode(), re.S
    )
    assert match, f"no error slot for {name}"
    return words(match.group(1))


def layout_form(*rows: tuple[str, int | None], **extra: str) -> dict[str, str]:
    """The layout form with ``rows`` (profile, start or None) and the rest empty."""
    data = {}
    for i in range(7):
        profile, start = rows[i] if i < len(rows) else ("", None)
        data[f"instances-{i}-profile"] = profile
        data[f"instances-{i}-start"] = "" if start is None else str(start)
    data |= {"config": "", "action": "apply"} | extra
    return data


# --- who may see the fleet -------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["alice", "carol", "victor", "bob"])
def test_tenant_leads_and_members_get_403_on_every_fleet_page(world, fleet, persona):
    client = logged_in(getattr(world, persona))
    for url in (FLEET, GPU_PAGE, PLAN, f"{PLAN}?source=quotas"):
        assert client.get(url).status_code == 403, url
    for url, body in ((LAYOUT, layout_form(("7g.80gb", 0))), (VALIDATE, layout_form())):
        assert client.post(url, body).status_code == 403, url
    assert client.post(f"{PLAN}?source=quotas", {"confirm": "yes"}).status_code == 403
    assert not MigLayout.objects.exists()
    home = text(client.get("/"))
    assert 'href="/fleet/"' not in home  # no "Fleet" link for them


def test_anonymous_visitors_are_sent_to_the_login_page(fleet):
    client = logged_in(None)
    for url in (FLEET, GPU_PAGE, PLAN):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    assert client.post(LAYOUT, layout_form(("7g.80gb", 0))).status_code == 302
    assert client.post(VALIDATE, layout_form()).status_code == 302
    assert not MigLayout.objects.exists()


def test_an_unknown_gpu_is_404_for_admins(world):
    client = logged_in(world.admin)
    assert client.get("/fleet/gpus/GPU-nope/").status_code == 404
    assert client.post("/fleet/gpus/GPU-nope/layout/validate/", {}).status_code == 404


# --- the fleet page --------------------------------------------------------------------------


def test_a_gpu_stored_with_a_uuid_that_is_no_url_is_shown_without_a_link(world, fleet):
    """Stored before uuids were checked: every page still draws, the GPU without a link."""
    bad = "GPU-a/b?c#d"
    Gpu.objects.filter(uuid=UUID).update(uuid=bad)
    client = logged_in(world.admin)
    for url in (FLEET, PLAN, f"{PLAN}?source=quotas", "/usage/"):
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert 'href="/fleet/gpus/GPU-a' not in page, url
    fleet_page = main(client.get(FLEET))
    assert bad in unescape(fleet_page)
    assert 'href="/fleet/gpus/GPU-gpu-node-1-0001/"' in fleet_page  # its sound neighbour


def test_admins_see_nodes_and_their_gpus(world, fleet):
    response = logged_in(world.admin).get(FLEET)
    assert response.status_code == 200
    assert 'href="/fleet/"' in text(response)  # the "Fleet" link in the header
    page = main(response)
    node = section(page, 'data-node="gpu-node-1"')
    shown = words(node)
    assert "gpu-node-1" in shown and "gpu-node-1.lab" in shown and "driver 580.65.06" in shown
    assert re.search(r"last report \d+ s ago", shown)
    assert "STALE" not in shown
    mig_row = words(re.search(rf'<tr data-gpu="{UUID}">.*?</tr>', node, re.S).group(0))
    assert A100 in mig_row and "1.0 / 80.0 GiB" in mig_row
    assert "n/a in MIG mode" in mig_row
    assert "3 of 8" in mig_row  # slices 0-3 and 5 are taken: 4, 6 and 7 are free
    whole = words(re.search(r'<tr data-gpu="GPU-gpu-node-1-0001">.*?</tr>', node, re.S).group(0))
    assert "37 %" in whole and "off" in whole and "—" in whole
    assert f'href="/fleet/gpus/{UUID}/"' in node


def test_free_slices_count_what_no_instance_takes(world, fleet):
    response = logged_in(world.admin).get(FLEET)
    assert f'<tr data-gpu="{UUID}">' in response.content.decode()
    # 3g.40gb takes 0-3, 1g.10gb takes 5: 4, 6 and 7 are free.
    assert 'data-free-slices="3"' in main(response)


def test_a_node_that_stopped_reporting_is_marked_stale(world, fleet, settings):
    add_node(world.admin, "gpu-node-2", [gpu("gpu-node-2", 0)])
    long_ago = timezone.now() - timedelta(seconds=settings.AGENT_STALE_AFTER_S + 30)
    Node.objects.filter(name="gpu-node-1").update(last_report_at=long_ago)
    page = main(logged_in(world.admin).get(FLEET))
    stale = section(page, 'data-node="gpu-node-1"')
    assert "data-stale" in stale and "STALE" in words(stale)
    assert re.search(r"last report \d+ s ago", words(stale))
    assert "STALE" not in words(section(page, 'data-node="gpu-node-2"'))
    assert "STALE" in words(main(logged_in(world.admin).get(GPU_PAGE)))


def test_the_fleet_page_takes_a_constant_number_of_queries(world):
    client = logged_in(world.admin)

    def grow(start: int, count: int) -> None:
        for n in range(start, start + count):
            name = f"node-{n}"
            node = add_node(world.admin, name, [gpu(name, i, instances=BUSY_3G) for i in range(4)])
            layouts.layout_set(
                gpu=Gpu.objects.get(uuid=f"GPU-{name}-0000"),
                instances=[{"profile": "3g.40gb", "start": 0}],
                actor=world.admin,
            )
            MigInstance.objects.filter(gpu__node=node, gi_id=1).update(tenant=world.team_b)

    grow(0, 1)
    client.get(FLEET)  # warm the session and the catalogue
    with CaptureQueriesContext(connection) as small:
        assert client.get(FLEET).status_code == 200
    small_count = len(small)
    grow(1, 6)
    with CaptureQueriesContext(connection) as big:
        response = client.get(FLEET)
    assert response.status_code == 200
    assert main(response).count("<tr data-gpu=") == 28
    assert len(big) == small_count, [q["sql"] for q in big.captured_queries]
    # session and user, the overview (4), the node page and its count, GPUs, their
    # instances, their latest layouts, and the header's inbox count
    assert small_count <= 14


# --- a GPU's page ----------------------------------------------------------------------------


def test_the_gpu_page_draws_the_observed_slices_where_they_are(world, fleet):
    response = logged_in(world.admin).get(GPU_PAGE)
    assert response.status_code == 200
    observed = section(main(response), 'data-layout="observed"')
    assert blocks(observed) == [("3g.40gb", 0, 4, "busy"), ("1g.10gb", 5, 1, "idle")]
    assert free_cells(observed) == [4, 6, 7]
    assert 'data-slices="8"' in observed
    busy = re.search(r'<li class="([^"]*)" data-profile="3g.40gb".*?</li>', observed, re.S)
    assert busy and "mig-at-0" in busy.group(1) and "mig-span-4" in busy.group(1)
    assert "mig-busy" in busy.group(1)
    shown = words(busy.group(0))
    assert "pid 4242" in shown and "pod pod-4242" in shown and "tenant team-a" in shown
    idle = re.search(r'<li class="([^"]*)" data-profile="1g.10gb"', observed)
    assert idle and "mig-at-5" in idle.group(1) and "mig-span-1" in idle.group(1)
    assert "No desired layout set" in words(section(main(response), 'data-layout="desired"'))


def test_the_desired_layout_shows_generation_state_message_and_history(world, fleet):
    target = Gpu.objects.get(uuid=UUID)
    layouts.layout_set(
        gpu=target, instances=[{"profile": "3g.40gb", "start": 0}], actor=world.admin
    )
    layouts.layout_set(
        gpu=target,
        instances=[{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}],
        actor=world.admin,
    )
    layouts.agent_result(
        node=fleet, uuid=UUID, generation=2, state="failed", message="busy: pid 4242"
    )
    page = main(logged_in(world.admin).get(GPU_PAGE))
    desired = section(page, 'data-layout="desired"')
    assert "generation 2" in words(desired)
    assert 'data-layout-state="failed"' in desired and "busy: pid 4242" in words(desired)
    assert blocks(desired) == [("3g.40gb", 0, 4, "kept"), ("3g.40gb", 4, 4, "new")]
    history = re.search(r'<table class="layout-history">.*?</table>', page, re.S).group(0)
    assert re.findall(r'data-generation="(\d+)"', history) == ["2", "1"]
    assert "superseded by generation 2" in words(history)
    # A failed layout was not applied: the form starts from what the GPU has.
    assert re.search(r'name="instances-1-start" value="5"', page)

    MigLayout.objects.filter(generation=2).update(state=LayoutState.REBOOT_REQUIRED, message="")
    desired = section(main(logged_in(world.admin).get(GPU_PAGE)), 'data-layout="desired"')
    assert 'data-layout-state="reboot-required"' in desired


def test_setting_a_valid_layout_stores_a_pending_generation(world, fleet):
    client = logged_in(world.admin)
    # Keeps the busy 3g.40gb at 0; the new 3g.40gb is placed by the rules (slice 4).
    response = client.post(LAYOUT, layout_form(("3g.40gb", 0), ("3g.40gb", None)))
    assert response.status_code == 302 and response["Location"] == GPU_PAGE
    layout = MigLayout.objects.get()
    assert (layout.generation, layout.state, layout.requested_by) == (
        1,
        LayoutState.PENDING,
        world.admin,
    )
    assert layout.instances == [
        {"profile": "3g.40gb", "start": 0},
        {"profile": "3g.40gb", "start": 4},
    ]
    page = client.get(GPU_PAGE)
    assert "Generation 1 of" in text(page) and "pending" in text(page)
    # The form starts from the layout in force.
    assert re.search(r'name="instances-1-start" value="4"', text(page))
    assert 'data-layout-state="pending"' in section(main(page), 'data-layout="desired"')


def test_an_invalid_layout_shows_every_rule_next_to_its_row_and_stores_nothing(world, fleet):
    response = logged_in(world.admin).post(
        LAYOUT, layout_form(("3g.40gb", 0), ("4g.40gb", None), ("4g.40gb", None), ("1g.10gb", 3))
    )
    assert response.status_code == 400
    assert "allows at most 1 x 4g.40gb per GPU" in slot(response, "instances-2-profile")
    assert "4g.40gb can start only at slice 0" in slot(response, "instances-1-start")
    assert "overlaps 3g.40gb" in slot(response, "instances-3-start")
    assert "needs 12 compute slices" in slot(response, "__all__")
    proposal = words(re.search(r'id="proposal-panel".*?</section>', text(response), re.S).group(0))
    assert "Not a valid layout" in proposal and "too many of one profile" in proposal
    assert "instances overlap" in proposal and "max-count" not in proposal  # words, not slugs
    assert not MigLayout.objects.exists()
    # What was typed stays in the form.
    assert re.search(r'name="instances-3-start" value="3"', text(response))


def test_a_layout_destroying_a_busy_instance_is_409_with_the_pid_unless_drained(world, fleet):
    client = logged_in(world.admin)
    response = client.post(LAYOUT, layout_form(("7g.80gb", 0)))
    assert response.status_code == 409
    message = slot(response, "__all__")
    assert "instance 1 (3g.40gb at slice 0) is busy: pid 4242 (pod pod-4242)" in message
    assert "drain" in message
    assert not MigLayout.objects.exists()

    drained = client.post(LAYOUT, layout_form(("7g.80gb", 0), drain="on"))
    assert drained.status_code == 302
    layout = MigLayout.objects.get()
    assert layout.waiting_for == [1] and layout.state == LayoutState.PENDING
    desired = section(main(client.get(GPU_PAGE)), 'data-layout="desired"')
    assert "waiting for instance 1 to go idle" in words(desired)


def test_check_validates_without_storing(world, fleet):
    response = logged_in(world.admin).post(
        LAYOUT, layout_form(("3g.40gb", 0), ("1g.10gb", 5), ("1g.10gb", None), action="check")
    )
    assert response.status_code == 200
    panel = re.search(r'id="proposal-panel".*?</section>', text(response), re.S).group(0)
    assert "Valid on" in words(panel)
    drawn = blocks(panel)
    assert drawn[0] == ("3g.40gb", 0, 4, "kept") and ("1g.10gb", 5, 1, "kept") in drawn
    (new,) = [b for b in drawn if b[3] == "new"]
    assert new[0] == "1g.10gb" and new[1] in (4, 6, 7)
    assert not MigLayout.objects.exists()

    # 2g.20gb starts only at 0, 2 or 4 on an A100: no room beside these two.
    crowded = logged_in(world.admin).post(
        LAYOUT, layout_form(("3g.40gb", 0), ("1g.10gb", 5), ("2g.20gb", None), action="check")
    )
    assert crowded.status_code == 200
    assert "there is no room for it" in slot(crowded, "instances-2-start")
    assert not MigLayout.objects.exists()


def test_a_named_configuration_from_nvidias_file_sets_the_layout(world, fleet):
    client = logged_in(world.admin)
    page = text(client.get(GPU_PAGE))
    options = re.search(r'<select name="config".*?</select>', page, re.S).group(0)
    assert 'value="all-balanced"' in options and 'value="all-1g.10gb"' in options
    assert 'value="all-1g.5gb"' not in options  # an A100-40GB profile: not valid here
    # all-3g.40gb keeps the busy 3g.40gb at slice 0 and adds one at slice 4.
    response = client.post(LAYOUT, layout_form(("1g.10gb", 3), config="all-3g.40gb"))
    assert response.status_code == 302
    assert MigLayout.objects.get().instances == [
        {"profile": "3g.40gb", "start": 0},
        {"profile": "3g.40gb", "start": 4},
    ]
    refused = client.post(LAYOUT, layout_form(config="all-1g.10gb"))  # destroys the busy one
    assert refused.status_code == 409
    assert MigLayout.objects.count() == 1


# --- the live check --------------------------------------------------------------------------


def test_the_validate_endpoint_answers_placements_and_the_drawing(world, fleet):
    client = logged_in(world.admin, csrf=True)
    client.get(GPU_PAGE)
    token = client.cookies["csrftoken"].value
    answer = client.post(
        VALIDATE, layout_form(("3g.40gb", 0), ("3g.40gb", None)), HTTP_X_CSRFTOKEN=token
    )
    assert answer.status_code == 200
    body = answer.json()
    assert body["valid"] is True and body["gpu_model"] == A100
    assert body["placements"] == [
        {"profile": "3g.40gb", "start": 0, "size": 4},
        {"profile": "3g.40gb", "start": 4, "size": 4},
    ]
    assert body["errors"] == {} and body["rules"] == []
    assert body["busy"] == []
    assert blocks(body["drawing"]) == [("3g.40gb", 0, 4, "kept"), ("3g.40gb", 4, 4, "new")]
    assert "Valid on" in words(body["panel"])
    assert not MigLayout.objects.exists()


def test_the_validate_endpoint_names_every_broken_rule_by_input(world, fleet):
    client = logged_in(world.admin)
    body = client.post(
        VALIDATE, layout_form(("4g.40gb", 0), ("3g.40gb", 2), ("7g.80gb", None))
    ).json()
    assert body["valid"] is False and body["placements"] == [] and body["drawing"] == ""
    assert {"invalid-start", "compute-slices", "no-room"} <= set(body["rules"])
    assert "3g.40gb can start only at slice 0 or 4" in body["errors"]["instances-1-start"][0]
    assert "instances-2-start" in body["errors"]
    assert any("compute slices" in m for m in body["errors"]["__all__"])
    assert "Not a valid layout" in words(body["panel"])
    # The panel says the rules in words; their slugs stay in the JSON's "rules".
    assert "start not allowed" in words(body["panel"]) and "no room left" in words(body["panel"])
    assert "no-room" not in words(body["panel"]) and "invalid-start" not in words(body["panel"])
    # The busy instances a valid layout would destroy, before anyone presses "Set layout".
    busy = client.post(VALIDATE, layout_form(("7g.80gb", 0))).json()
    assert busy["valid"] is True
    assert busy["busy"] == ["instance 1 (3g.40gb at slice 0) is busy: pid 4242 (pod pod-4242)"]
    assert "409" in words(busy["panel"])
    # The form's shape: a start with no profile, a start that is not a number.
    shape = client.post(VALIDATE, layout_form(("", 3), ("1g.10gb", None))).json()
    assert "Choose a profile" in shape["errors"]["instances-0-profile"][0]
    assert not MigLayout.objects.exists()


def test_the_validate_endpoint_is_post_with_csrf_only(world, fleet):
    client = logged_in(world.admin, csrf=True)
    assert client.get(VALIDATE).status_code == 405
    assert client.post(VALIDATE, layout_form(("7g.80gb", 0))).status_code == 403  # no token


def test_the_page_loads_its_script_and_no_inline_code(world, fleet):
    page = text(logged_in(world.admin).get(GPU_PAGE))
    assert '<script src="/static/portal/layout-form.js" defer></script>' in page
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert " style=" not in page and "<style" not in page
    assert f'data-validate-url="{VALIDATE}"' in page


# --- the planner -----------------------------------------------------------------------------


def plan_query(*lines: tuple[str, int, str], source: str = "manual") -> str:
    query = [f"source={source}"]
    for i, (profile, count, model) in enumerate(lines):
        query += [f"demand-{i}-profile={profile}", f"demand-{i}-count={count}"]
        query += [f"demand-{i}-model={model}"]
    return PLAN + "?" + "&".join(q.replace(" ", "+") for q in query)


@pytest.fixture
def two_gpus(world: World) -> Node:
    """gpu-node-1: GPU 0 with a busy 3g.40gb at 0 (pid 4242); GPU 1 in MIG mode, empty."""
    return add_node(
        world.admin,
        "gpu-node-1",
        [gpu("gpu-node-1", 0, instances=BUSY_3G[:1]), gpu("gpu-node-1", 1)],
    )


def test_the_planner_shows_current_and_proposed_layouts(world, two_gpus):
    client = logged_in(world.admin)
    assert "Propose a plan" in text(client.get(PLAN))
    response = client.get(plan_query(("3g.40gb", 3, ""), ("7g.80gb", 1, A100)))
    assert response.status_code == 200
    page = main(response)
    # The busy 3g.40gb counts as one and stays where it is; a second goes beside it, and the
    # empty GPU takes the 7g.80gb (more compute slices met than two more 3g.40gb).
    busy_gpu = re.search(r'data-gpu="GPU-gpu-node-1-0000">.*?</article>', page, re.S).group(0)
    current, proposed = busy_gpu.split('class="arrow"')
    assert blocks(current) == [("3g.40gb", 0, 4, "busy")]
    assert blocks(proposed) == [("3g.40gb", 0, 4, "busy"), ("3g.40gb", 4, 4, "new")]
    assert "creates: 3g.40gb@4" in words(busy_gpu) and "Destroys: nothing" in words(busy_gpu)
    empty_gpu = re.search(r'data-gpu="GPU-gpu-node-1-0001">.*?</article>', page, re.S).group(0)
    assert blocks(empty_gpu.split('class="arrow"')[1]) == [("7g.80gb", 0, 8, "new")]
    explanation = words(re.search(r'<ul class="explanation">.*?</ul>', page, re.S).group(0))
    assert "2 to reconfigure" in explanation and "demand met: 3 of 4 instances" in explanation
    unmet = words(re.search(r'<tr data-unmet="3g.40gb">.*?</tr>', page, re.S).group(0))
    assert unmet.startswith("3g.40gb any 3 2") and "serves other demand (7g.80gb)" in unmet
    assert 'name="fingerprint"' in page and "Apply…" in page
    assert not MigLayout.objects.exists()


def test_the_plan_is_applied_only_after_a_confirmation(world, two_gpus):
    client = logged_in(world.admin, csrf=True)
    url = plan_query(("3g.40gb", 2, A100))  # the second goes beside the busy one on GPU 0
    page = client.get(url)
    fingerprint = re.search(r'name="fingerprint" value="([^"]+)"', text(page)).group(1)
    token = client.cookies["csrftoken"].value
    assert re.findall(r'<article class="plan-gpu" data-gpu="([^"]+)"', main(page)) == [UUID]

    # The first POST asks to confirm, and changes nothing.
    first = client.post(url, {"fingerprint": fingerprint, "csrfmiddlewaretoken": token})
    assert first.status_code == 200
    confirm = re.search(r"<form[^>]*data-confirm>.*?</form>", text(first), re.S).group(0)
    assert 'name="confirm" value="yes"' in confirm
    assert "on 1 GPU (gpu-node-1/0)" in words(confirm)
    assert not MigLayout.objects.exists()

    # A fingerprint of another plan applies nothing.
    stale = client.post(
        url, {"fingerprint": "0" * 32, "confirm": "yes", "csrfmiddlewaretoken": token}
    )
    assert stale.status_code == 409
    assert "nothing was applied" in text(stale)
    assert not MigLayout.objects.exists()

    second = client.post(
        url, {"fingerprint": fingerprint, "confirm": "yes", "csrfmiddlewaretoken": token}
    )
    assert second.status_code == 302 and second["Location"] == FLEET
    layout = MigLayout.objects.get()
    assert (layout.gpu.uuid, layout.state, layout.requested_by) == (
        UUID,
        LayoutState.PENDING,
        world.admin,
    )
    assert layout.instances == [
        {"profile": "3g.40gb", "start": 0},
        {"profile": "3g.40gb", "start": 4},
    ]
    assert "Plan applied to 1 GPU" in text(client.get(FLEET))

    # The same plan again: the GPU has that layout pending already, so nothing is applied.
    again = client.get(url)
    assert "asks for this layout already" in text(again)
    assert "Apply…" not in text(again)


def test_a_gpu_that_refuses_is_reported_and_the_others_still_get_their_layouts(world):
    """Work can start on an instance between the confirmation and the apply: the service
    refuses that GPU alone (409, with the pid) and the other GPUs get their layouts."""
    add_node(
        world.admin,
        "gpu-node-1",
        [gpu("gpu-node-1", 0, instances=[instance(1, "7g.80gb", 0, 8)]), gpu("gpu-node-1", 1)],
    )
    proposal = plans.mig_plan_propose(
        cluster=None, demand=[Demand("3g.40gb", 4, model=A100)], quota_lines=[]
    )
    assert [r.gpu.uuid for r in proposal.to_apply] == [UUID, "GPU-gpu-node-1-0001"]
    MigInstance.objects.filter(gpu__uuid=UUID).update(
        busy=True, processes=[{"pid": 777, "used_memory_mib": 1, "pod_uid": ""}]
    )
    done, refused = plans.mig_plan_layouts_set(changes=proposal.to_apply, actor=world.admin)
    assert [layout.gpu.uuid for layout in done] == ["GPU-gpu-node-1-0001"]
    ((refusal),) = refused
    assert refusal.row.gpu.uuid == UUID and refusal.status == 409
    assert "instance 1 (7g.80gb at slice 0) is busy: pid 777" in refusal.message
    assert list(MigLayout.objects.values_list("gpu__uuid", flat=True)) == ["GPU-gpu-node-1-0001"]


def test_a_plan_whose_gpus_changed_is_refused_whole_as_a_stored_proposal_is(world):
    """The planner page applies through the stored proposals' rule (``state_digest``): an
    instance that went busy after the plan was made refuses the whole plan (409, nothing
    applied), and its fingerprint changes; a plan made afresh applies."""
    add_node(
        world.admin,
        "gpu-node-1",
        [gpu("gpu-node-1", 0, instances=[instance(1, "7g.80gb", 0, 8)]), gpu("gpu-node-1", 1)],
    )
    demand = [Demand("3g.40gb", 4, model=A100)]
    proposal = plans.mig_plan_propose(cluster=None, demand=demand)
    MigInstance.objects.filter(gpu__uuid=UUID).update(
        busy=True, processes=[{"pid": 777, "used_memory_mib": 1, "pod_uid": ""}]
    )
    with pytest.raises(Conflict) as stale:
        plans.mig_plan_apply(proposal=proposal, actor=world.admin)
    assert "the GPUs changed since it was made" in stale.value.message
    assert "Nothing was applied" in stale.value.message
    assert not MigLayout.objects.exists()

    fresh = plans.mig_plan_propose(cluster=None, demand=demand)
    assert fresh.fingerprint != proposal.fingerprint
    assert [r.gpu.uuid for r in fresh.to_apply] == ["GPU-gpu-node-1-0001"]  # the busy one stays
    done, refused = plans.mig_plan_apply(proposal=fresh, actor=world.admin)
    assert [layout.gpu.uuid for layout in done] == ["GPU-gpu-node-1-0001"] and refused == []


def test_the_planner_reads_demand_from_the_tenants_mig_quotas(world):
    add_node(world.admin, "h100-node", [gpu("h100-node", 0, name=H100)])
    nothing = main(logged_in(world.admin).get(f"{PLAN}?source=quotas"))
    assert "data-no-demand" in nothing and "Apply…" not in nothing
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.h100)
    Quota.objects.create(
        quota_set=quota_set,
        flavor=world.h100_mig,
        resource="nvidia.com/mig-1g.10gb",
        guaranteed=Decimal(3),
        limit=Decimal(4),
    )
    response = logged_in(world.admin).get(f"{PLAN}?source=quotas")
    assert response.status_code == 200
    page = main(response)
    line = words(re.search(r'<tr data-tenant="team-a">.*?</tr>', page, re.S).group(0))
    assert "demo-h100" in line and "1g.10gb" in line and H100 in line and line.endswith("3")
    article = re.search(r'data-gpu="GPU-h100-node-0000">.*?</article>', page, re.S).group(0)
    created = [b for b in blocks(article) if b[3] == "new"]
    assert [b[0] for b in created] == ["1g.10gb"] * 3
    assert "All the demand is met" in page


def test_planner_input_errors_are_shown_next_to_their_fields(world, two_gpus):
    client = logged_in(world.admin)
    response = client.get(f"{PLAN}?source=manual&demand-0-profile=3g.40gb&demand-0-count=")
    assert response.status_code == 400
    assert "How many instances?" in slot(response, "demand-0-count")
    empty = client.get(f"{PLAN}?source=manual")
    assert empty.status_code == 400
    assert "at least one profile" in slot(empty, "__all__")
    assert not MigLayout.objects.exists()
