"""The admin usage page's filter offers every cluster and GPU flavor as choices and shows a
wrong value inline (400, the form kept, the choices named), as the tenant usage page's does;
a flavor chosen narrows the page to the clusters and rows of that flavor. Pages work on
SQLite too (run without DATABASE_URL).

demo-a100 has a100-80gb; demo-h100 has h100-80gb and the MIG flavor h100-mig-1g-10gb.
"""

from __future__ import annotations

import re
from html import unescape

import pytest

from tests.dashboards.test_pages import client_for, range_error
from tests.factories import ClusterFactory

USAGE = "/usage/"


def options(page: str, name: str) -> list[tuple[str, bool]]:
    """(value, selected) of every option of the select named ``name``."""
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', page, re.S)
    assert select, f"no select {name}"
    return [
        (unescape(value), bool(selected))
        for value, selected in re.findall(r'<option value="([^"]*)"( selected)?>', select[1])
    ]


def test_the_filter_offers_every_cluster_and_gpu_flavor(world):
    ClusterFactory(name="demo-empty")  # no flavor yet: offered all the same
    page = client_for(world.admin).get(USAGE).content.decode()
    assert options(page, "cluster") == [
        ("", False),
        ("demo-a100", False),
        ("demo-empty", False),
        ("demo-h100", False),
    ]
    assert options(page, "flavor") == [
        ("", False),
        ("a100-80gb", False),
        ("h100-80gb", False),
        ("h100-mig-1g-10gb", False),
    ]
    assert '<input type="text" name="cluster"' not in page  # no free text to mistype


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?cluster=nowhere", "cluster: nowhere is not one of the clusters: demo-a100, demo-h100."),
        (
            "?flavor=l40s",
            "flavor: l40s is not one of the GPU flavors: a100-80gb, h100-80gb, h100-mig-1g-10gb.",
        ),
        (
            "?cluster=demo-a100&flavor=h100-80gb",
            "flavor: h100-80gb is not on demo-a100; its GPU flavors there: a100-80gb.",
        ),
        ("?cluster=%3Cb%3Ex", "cluster: <b>x is not one of the clusters: demo-a100, demo-h100."),
    ],
)
def test_a_wrong_value_is_shown_inline_with_the_choices(world, query, message):
    response = client_for(world.admin).get(USAGE + query)
    assert response.status_code == 400
    assert range_error(response) == message
    page = response.content.decode()
    assert "<b>x" not in page  # escaped
    assert "Usage across clusters" in page and '<select name="cluster"' in page  # the form kept


def test_a_cluster_without_flavors_says_so_when_a_flavor_is_asked_there(world):
    ClusterFactory(name="demo-empty")
    response = client_for(world.admin).get(USAGE + "?cluster=demo-empty&flavor=a100-80gb")
    assert response.status_code == 400
    assert range_error(response) == (
        "flavor: a100-80gb is not on demo-empty; it has no GPU flavors yet."
    )


def test_a_choice_narrows_the_page_and_stays_selected(world):
    admin = client_for(world.admin)
    response = admin.get(USAGE + "?flavor=h100-mig-1g-10gb")
    assert response.status_code == 200
    dashboard = response.context["dashboard"]
    assert [c.cluster.name for c in dashboard.clusters] == ["demo-h100"]
    assert [f.flavor.name for f in dashboard.clusters[0].flavors] == ["h100-mig-1g-10gb"]
    page = response.content.decode()
    assert ("h100-mig-1g-10gb", True) in options(page, "flavor")
    both = admin.get(USAGE + "?cluster=demo-h100&flavor=h100-80gb")
    assert both.status_code == 200
    assert [f.flavor.name for c in both.context["dashboard"].clusters for f in c.flavors] == [
        "h100-80gb"
    ]
    assert ("demo-h100", True) in options(both.content.decode(), "cluster")
