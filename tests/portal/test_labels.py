"""Every form control on the pages has a name a screen reader announces: a ``<label for>``, a
wrapping ``<label>``, ``aria-label`` or ``aria-labelledby`` (the MIG layout form's rows and the
planner's demand lines had none). Read from the HTML with Django's test client, so it runs where
the browser tests' axe-core check cannot (no chromium); every table also scrolls in its own box.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from tests.conftest import World
from tests.gpu_agent.test_fleet_pages import BUSY_3G, add_node, gpu
from tests.pages import fire, logged_in

CONTROLS = {"input", "select", "textarea"}
UNLABELLED_TYPES = {"hidden", "submit", "button", "reset", "image"}


class Controls(HTMLParser):
    """Collects the form controls and how each is labelled, and each table's parent."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[tuple[str, dict[str, str | None]]] = []
        self.label_for: set[str] = set()
        self.open_labels = 0
        self.wrapped: list[bool] = []
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.bare_tables: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "label":
            self.open_labels += 1
            if attributes.get("for"):
                self.label_for.add(attributes["for"] or "")
        if tag in CONTROLS and attributes.get("type") not in UNLABELLED_TYPES:
            self.controls.append((tag, attributes))
            self.wrapped.append(self.open_labels > 0)
        if tag == "table":
            parent = self.stack[-1][1] if self.stack else {}
            if "table-scroll" not in (parent.get("class") or "").split():
                self.bare_tables.append(attributes.get("class") or "(no class)")
        if tag not in {"input", "br", "img", "meta", "link", "hr", "col", "source", "wbr"}:
            self.stack.append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self.open_labels -= 1
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def unlabelled(self) -> list[str]:
        names = []
        for (tag, attributes), wrapped in zip(self.controls, self.wrapped, strict=True):
            labelled = (
                wrapped
                or (attributes.get("id") or "") in self.label_for
                or attributes.get("aria-label")
                or attributes.get("aria-labelledby")
            )
            if not labelled:
                names.append(f"<{tag} name={attributes.get('name')!r}>")
        return names


def parsed(response: object) -> Controls:
    assert getattr(response, "status_code", None) == 200
    parser = Controls()
    parser.feed(response.content.decode())  # type: ignore[attr-defined]
    return parser


@pytest.fixture
def fleet_world(world: World) -> World:
    add_node(world.admin, "gpu-node-1", [gpu("gpu-node-1", 0, instances=BUSY_3G)])
    fire(world.team_a, world.a100_gpu)
    return world


ADMIN_PAGES = [
    "/fleet/",
    "/fleet/gpus/GPU-gpu-node-1-0000/",
    "/fleet/plan/",
    "/clusters/demo-a100/",
    "/console/",
    "/console/approvals/",
    "/console/grants/",
    "/usage/",
    "/showback/",
    "/alerts/",
]
LEAD_PAGES = [
    "/",
    "/tenants/team-a/",
    "/tenants/team-a/requests/new/?cluster=demo-a100",
    "/requests/",
    "/tenants/team-a/usage/",
    "/tenants/team-a/profile/",
    "/tenants/team-a/showback/",
    "/tenants/team-a/grants/",
    "/tenants/team-a/grants/new/",
    "/alerts/",
    "/inbox/",
]


@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_every_control_on_an_admin_page_has_a_label(fleet_world: World, path: str) -> None:
    page = parsed(logged_in(fleet_world.admin).get(path))
    assert page.unlabelled() == []
    assert page.bare_tables == []


@pytest.mark.parametrize("path", LEAD_PAGES)
def test_every_control_on_a_lead_page_has_a_label(fleet_world: World, path: str) -> None:
    page = parsed(logged_in(fleet_world.alice).get(path))
    assert page.unlabelled() == []
    assert page.bare_tables == []


def test_the_mig_layout_rows_name_their_instance(fleet_world: World) -> None:
    page = parsed(logged_in(fleet_world.admin).get("/fleet/gpus/GPU-gpu-node-1-0000/"))
    rows = [a for tag, a in page.controls if (a.get("name") or "").startswith("instances-0-")]
    assert {a["name"] for a in rows} == {"instances-0-profile", "instances-0-start"}
    assert all(a.get("id") in page.label_for for a in rows)
    html = logged_in(fleet_world.admin).get("/fleet/gpus/GPU-gpu-node-1-0000/").content.decode()
    assert ">Profile of instance 1</label>" in html
    assert ">Start of instance 1 (memory slice, optional)</label>" in html
