"""Every route of the URL conf with a concrete sample URL, for the sweeps in this package.

A route with a parameter this module has no sample for fails loudly (``KeyError``), so a new
kind of route gets a sample rather than silently escaping the sweeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.urls import URLPattern, resolve

from tests.urlconf import url_patterns

SAMPLES = {
    "slug": "team-a",
    "tenant_slug": "team-a",
    "username": "alice",
    "cluster": "demo-a100",
    "name": "demo-a100",
    "pk": "1",
    "id": "1",
    "uuid": "GPU-00000000-0000-0000-0000-000000000001",
    "object_id": "1",
    "content_type_id": "1",
    "url": "no-such-page/",
    "format": "json",
}
_NAMED_GROUP = re.compile(r"\(\?P<(\w+)>(?:\[[^\]]*\]|[^)])*\)")
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


@dataclass(frozen=True)
class Route:
    route: str
    pattern: URLPattern

    @property
    def name(self) -> str:
        return self.pattern.name or self.route

    @property
    def is_api(self) -> bool:
        return self.route.startswith("api/")

    @property
    def is_django_admin(self) -> bool:
        return self.route.startswith("admin/")

    def url(self) -> str:
        url = _NAMED_GROUP.sub(lambda m: _sample(m[1], m[0]), self.route)
        url = _CONVERTER.sub(lambda m: SAMPLES[m[1]], url)
        url = "/" + url.replace("^", "").replace("$", "").replace("\\", "")
        resolve(url)  # the sample must reach a route (not necessarily this one: admin's catch-all)
        return url


def _sample(name: str, group: str) -> str:
    if name == "app_label":  # Django admin's "(?P<app_label>tenants|quotas|...)"
        return re.findall(r"\w+", group.split(">", 1)[1])[0]
    return SAMPLES[name]


def all_routes() -> list[Route]:
    routes = []
    for route, pattern in url_patterns():
        if "format" in _CONVERTER.findall(route) + re.findall(r"\(\?P<(\w+)>", route):
            continue  # DRF's ".json" aliases of routes listed anyway
        routes.append(Route(route, pattern))
    return routes
