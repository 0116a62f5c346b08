"""A GPU's page follows its MIG layout without a reload: the status endpoint the page's script
asks (``/fleet/gpus/<uuid>/status/``), what it answers while the agent works (desired against
observed, the state in words, ``final``), who may ask it (exactly who may open the page), and
the page's side: the script is a static file, and without JavaScript the page still shows the
state with a link to reload. Fleet data comes in through the services, as an agent sends it.

gpu-node-1's GPU 0 is an A100-SXM4-80GB in MIG mode with a busy 3g.40gb at slices 0-3 and an
idle 1g.10gb at slice 5.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from gpu_agent.models import Gpu, LayoutState, MigLayout, Node
from gpu_agent.services import layouts, reports
from tests.approvals.test_live_status import STRICT_POLICY
from tests.conftest import World
from tests.gpu_agent.test_fleet_pages import BUSY_3G, add_node, blocks, gpu, instance, words
from tests.pages import logged_in, main

UUID = "GPU-gpu-node-1-0000"
PAGE = f"/fleet/gpus/{UUID}/"
STATUS = f"/fleet/gpus/{UUID}/status/"
NEW_LAYOUT = [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]


@pytest.fixture
def node(world: World) -> Node:
    return add_node(world.admin, "gpu-node-1", [gpu("gpu-node-1", 0, instances=BUSY_3G)])


def ask(client: Client, url: str = STATUS) -> dict[str, Any]:
    response = client.get(url, HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content[:300]
    assert response["Cache-Control"] == "no-store"
    return response.json()  # type: ignore[no-any-return]


def report(node: Node, generation: int, instances: list[dict[str, Any]]) -> None:
    """The agent's next report: the GPU as it is now, at ``generation``."""
    state = gpu("gpu-node-1", 0, instances=instances) | {"applied_generation": generation}
    reports.agent_report_ingest(
        node=node,
        report={
            "node": "gpu-node-1",
            "sent_at": "2026-12-03T08:01:00Z",
            "agent_version": "1.0",
            "driver_version": "580.65.06",
            "gpus": [state],
        },
    )


def test_the_status_follows_the_layout_from_pending_to_applied(world: World, node: Node) -> None:
    client = logged_in(world.admin)
    nothing = ask(client)
    assert nothing["desired"] is None and nothing["final"] is True
    assert nothing["text"] == "No desired layout set: the GPU keeps what it has."
    assert [(i["profile"], i["start"]) for i in nothing["observed"]] == [
        ("3g.40gb", 0),
        ("1g.10gb", 5),
    ]

    layouts.layout_set(gpu=Gpu.objects.get(uuid=UUID), instances=NEW_LAYOUT, actor=world.admin)
    pending = ask(client)
    assert pending["final"] is False
    assert pending["desired"]["generation"] == 1 and pending["desired"]["state"] == "pending"
    assert pending["text"].startswith("Generation 1 (3g.40gb@0, 3g.40gb@4) is pending")
    fragment = pending["fragments"]["layouts"]
    assert 'data-layout-state="pending"' in fragment and 'data-live-final="false"' in fragment
    assert blocks(fragment) == [
        ("3g.40gb", 0, 4, "busy"),  # observed
        ("1g.10gb", 5, 1, "idle"),
        ("3g.40gb", 0, 4, "kept"),  # desired
        ("3g.40gb", 4, 4, "new"),
    ]
    assert "reload the page" in words(fragment)
    # The page starts from the same fingerprint and endpoint the script then asks.
    page = main(client.get(PAGE))
    assert f'data-live-url="{STATUS}"' in page
    assert f'data-live-version="{pending["version"]}"' in page

    layouts.agent_result(node=node, uuid=UUID, generation=1, state="success")
    report(node, 1, [instance(1, "3g.40gb", 0, 4, 4242), instance(3, "3g.40gb", 4, 4)])
    applied = ask(client)
    assert applied["final"] is True and applied["desired"]["state"] == LayoutState.SUCCESS
    assert applied["applied_generation"] == 1
    assert re.fullmatch(
        r"Generation 1 \(3g\.40gb@0, 3g\.40gb@4\) is applied \(at \d\d:\d\d UTC\)\.",
        applied["text"],
    ), applied["text"]
    assert [(i["profile"], i["start"]) for i in applied["observed"]] == [
        ("3g.40gb", 0),
        ("3g.40gb", 4),
    ]
    fragment = applied["fragments"]["layouts"]
    assert 'data-layout-state="success"' in fragment and 'data-live-final="true"' in fragment
    # Every block of the page that the layout changes comes with it (issue 35 item 3).
    fragments = applied["fragments"]
    assert set(fragments) == {"layouts", "facts", "history", "device-plugin", "layout-flash"}
    assert "0 of 8" in words(fragments["facts"]) and "1 (as the agent reports)" in words(
        fragments["facts"]
    )
    assert 'data-generation="1"' in fragments["history"]
    assert 'data-layout-state="success"' in fragments["history"]
    assert "is pending" not in words(fragments["layout-flash"])
    assert 'class="success"' in fragments["layout-flash"]
    assert 'data-live-fragment="device-plugin"' in fragments["device-plugin"]
    assert "reload the page" not in words(fragment)
    assert applied["version"] != pending["version"]
    assert ask(client)["version"] == applied["version"]  # nothing changed, nothing to swap
    assert "live-status.js" not in client.get(PAGE).content.decode()  # nothing to follow


def test_a_failed_layout_is_final_and_says_why(world: World, node: Node) -> None:
    layouts.layout_set(gpu=Gpu.objects.get(uuid=UUID), instances=NEW_LAYOUT, actor=world.admin)
    layouts.agent_result(
        node=node, uuid=UUID, generation=1, state="failed", message="busy: pid 4242"
    )
    failed = ask(logged_in(world.admin))
    assert failed["final"] is True and failed["desired"]["state"] == "failed"
    assert failed["text"] == "Generation 1 (3g.40gb@0, 3g.40gb@4) failed: busy: pid 4242"


@pytest.mark.parametrize("persona", ["alice", "carol", "victor", "bob"])
def test_only_admins_may_ask_as_only_admins_open_the_page(world, node, persona) -> None:
    layouts.layout_set(gpu=Gpu.objects.get(uuid=UUID), instances=NEW_LAYOUT, actor=world.admin)
    client = logged_in(getattr(world, persona))
    assert client.get(PAGE).status_code == 403
    for refused in (client.get(STATUS), client.post(STATUS)):
        assert refused.status_code == 403
        assert b"3g.40gb" not in refused.content


def test_anonymous_and_unknown_gpus_get_what_the_page_gives(world: World, node: Node) -> None:
    anonymous = Client()
    for url in (PAGE, STATUS):
        response = anonymous.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    admin = logged_in(world.admin)
    assert admin.get("/fleet/gpus/GPU-nope/").status_code == 404
    assert admin.get("/fleet/gpus/GPU-nope/status/").status_code == 404
    assert admin.post(STATUS).status_code == 405
    assert not MigLayout.objects.exists()


def test_the_page_loads_the_script_as_a_file_under_the_unchanged_policy(world, node) -> None:
    layouts.layout_set(gpu=Gpu.objects.get(uuid=UUID), instances=NEW_LAYOUT, actor=world.admin)
    client = logged_in(world.admin)
    response = client.get(PAGE)
    assert response["Content-Security-Policy"] == STRICT_POLICY
    assert client.get(STATUS)["Content-Security-Policy"] == STRICT_POLICY
    page = response.content.decode()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S)
    assert any("portal/live-status" in attrs for attrs, _ in scripts), scripts
    assert all('src="' in attrs and not body.strip() for attrs, body in scripts), scripts
    assert not re.search(r"<[^>]+\son[a-z]+\s*=", page), "an inline event handler"
    assert f'<a href="{PAGE}">reload the page</a>' in page
