"""Tenant isolation: another tenant's objects answer 404 to every method and never show up.

The routes under test are read from the URL conf, so an endpoint added under a tenant is
covered without anyone remembering to add it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from tenants.models import Membership, Namespace, Tenant
from tenants.services import api_token_create

# A route that takes one of these parameters serves one tenant's data.
TENANT_PARAMS = {"tenant_slug", "slug"}
PARAM_NAMES = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>")


LEADS_ONLY_PAGES = {"request-new", "tenant-grant-new"}
# Console pages for platform admins: everyone else gets the same 403 whichever tenant the URL
# names (asked before the tenant is looked up), so an outsider learns nothing from them.
ADMINS_ONLY_PAGES = {"tenant-namespace-adopt"}
# Asking to join a team (issue 33): any signed-in person given a team's slug asks to join it,
# so these answer for a team one is not in (the join form; one's own asks, an ask sent) where
# a slug that names no team answers 404. Checked in tests/tenants/test_join_requests.py.
JOINABLE = {"tenant-join-request-list", "tenant-join"}
# An ask to join is for the tenant's leads (and admins) and the person who asked: a member or
# viewer is not told of it (404).
LEADS_AND_ASKER = {"tenant-join-request-detail"}
MISSING_ASK = "987654321"


def admins_only(route: Route) -> bool:
    return not route.is_api and route.pattern.name in ADMINS_ONLY_PAGES


@dataclass(frozen=True)
class Route:
    route: str
    pattern: URLPattern
    methods: tuple[str, ...]

    @property
    def is_api(self) -> bool:
        return self.route.startswith("api/")

    def url(self, *, tenant: str, member: str, ask: str = MISSING_ASK) -> str:
        """A concrete URL; a parameter this does not know fails here, so that a new kind of
        route gets a sample value rather than being skipped."""
        samples = {
            "tenant_slug": tenant,
            "slug": tenant,
            "username": member,
            "cluster": "demo-a100",
            "format": "json",
            "name": f"{tenant}-training",  # a namespace of the tenant
            # an ask to join the tenant, or a workload (those routes answer 404 for another
            # tenant before looking it up)
            "pk": ask,
            "id": ask,
        }
        url = re.sub(r"\(\?P<(\w+)>(?:\[[^\]]*\]|[^)])*\)", lambda m: samples[m[1]], self.route)
        url = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: samples[m[1]], url)
        url = "/" + url.replace("^", "").replace("$", "")
        match = resolve(url)  # the sample URL must reach the route it was made from
        assert match.route == re.sub(r"(?<!\[)\^", "", self.route), (url, self.route)
        return url


def _walk(resolver: URLResolver, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk(entry, route)
        else:
            yield route, entry


def _methods(pattern: URLPattern) -> tuple[str, ...]:
    callback = pattern.callback
    if actions := getattr(callback, "actions", None):  # a DRF viewset
        return tuple(sorted(actions))
    if view_class := getattr(callback, "view_class", None):  # a class-based view
        names = set(view_class.http_method_names) - {"head", "options", "trace"}
        return tuple(sorted(m for m in names if hasattr(view_class, m)))
    return ("get", "post")  # a function view: try reading and writing


def tenant_routes() -> list[Route]:
    routes = []
    for route, pattern in _walk(get_resolver()):
        params = {a or b for a, b in PARAM_NAMES.findall(route)}
        if "format" in params:  # DRF's ".json" aliases of the routes collected here
            continue
        if params & TENANT_PARAMS:
            routes.append(Route(route, pattern, _methods(pattern)))
    return routes


ROUTES = tenant_routes()


def test_the_generated_route_list_covers_the_tenant_endpoints():
    api = {(r.pattern.name, m) for r in ROUTES if r.is_api for m in r.methods}
    assert {
        ("tenant-detail", "get"),
        ("tenant-detail", "patch"),
        ("tenant-namespace-list", "get"),
        ("tenant-namespace-list", "post"),
        ("tenant-member-list", "post"),
        ("tenant-member-detail", "patch"),
        ("tenant-member-detail", "delete"),
        ("tenant-quota-list", "get"),
    } <= api
    assert "tenant-detail" in {r.pattern.name for r in ROUTES if not r.is_api}  # the page


def test_every_tenant_route_in_the_openapi_document_is_tested():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = {
        path.replace("{tenant_slug}", "team-a")
        .replace("{slug}", "team-a")
        .replace("{username}", "alice")
        .replace("{cluster}", "demo-a100")
        .replace("{name}", "team-a-training")
        .replace("{id}", MISSING_ASK)
        for path in schema["paths"]
        if "{tenant_slug}" in path or "{slug}" in path
    }
    tested = {r.url(tenant="team-a", member="alice") for r in ROUTES if r.is_api}
    assert documented == tested


INTRUSIONS = [
    pytest.param("bob", "team-a", "alice", id="team-b lead -> team-a"),
    pytest.param("alice", "team-b", "bob", id="team-a lead -> team-b"),
    pytest.param("victor", "team-c", "admin", id="team-a viewer -> team-c"),
]


def _body(route: Route, method: str) -> dict[str, object]:
    """A body a member with the right role could send successfully, so that the only reason
    left to refuse it is isolation."""
    if method in ("get", "delete"):
        return {}
    if "members" in route.route:
        return {"username": "bob", "role": "lead"} if method == "post" else {"role": "lead"}
    if "namespaces" in route.route:
        return {"name": "stolen-namespace"}
    return {"display_name": "Stolen"}


def _request(client, method: str, url: str, body: dict):  # type: ignore[no-untyped-def]
    if isinstance(client, APIClient):
        return getattr(client, method)(url, body or None, format="json")
    return getattr(client, method)(url, body)


def _clients(user) -> tuple[APIClient, Client]:  # type: ignore[no-untyped-def]
    api = APIClient()
    api.force_authenticate(user)
    page = Client()
    page.force_login(user)
    return api, page


@pytest.mark.parametrize(("intruder", "target", "member"), INTRUSIONS)
def test_another_tenants_routes_answer_404_and_never_name_it(world, intruder, target, member):
    intruder_user = getattr(world, intruder)
    Tenant.objects.filter(slug=target).update(display_name="Secret Project Zeta")
    api, page = _clients(intruder_user)
    state = _database_state()
    checked = 0
    for route in ROUTES:
        if route.pattern.name in JOINABLE:
            continue
        client = api if route.is_api else page
        for method in route.methods:
            url = route.url(tenant=target, member=member)
            body = _body(route, method)
            response = _request(client, method, url, body)
            refused = 403 if admins_only(route) else 404
            assert response.status_code == refused, (method, url, response.content)
            text = response.content.decode()
            assert target not in text, (method, url, text)
            assert "Secret Project Zeta" not in text
            # ...and exactly what a tenant that does not exist answers: no oracle
            missing = _request(
                client, method, route.url(tenant="no-such-team", member=member), body
            )
            assert missing.status_code == refused
            assert _without_csrf(missing.content) == _without_csrf(response.content), url
            checked += 1
    assert checked >= 10
    assert _database_state() == state


def _without_csrf(content: bytes) -> bytes:
    """Pages carry a CSRF token that is masked differently in every response."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", content)


def _database_state() -> tuple:
    return (
        list(Tenant.objects.order_by("slug").values_list("slug", "display_name", "state")),
        list(Namespace.objects.order_by("name").values_list("name", "tenant__slug")),
        list(
            Membership.objects.order_by("pk").values_list("tenant__slug", "user__username", "role")
        ),
    )


@pytest.mark.parametrize("persona", ["alice", "carol", "victor", "admin"])
def test_members_and_admins_reach_every_tenant_route(world, persona):
    """The other side of the coin: the routes above do exist for those who may see them."""
    from tenants.services import join_request_create
    from tests.factories import UserFactory

    ask = join_request_create(tenant=world.team_a, user=UserFactory(username="dave")).pk
    api, page = _clients(getattr(world, persona))
    for route in ROUTES:
        if "get" not in route.methods:
            continue
        client = api if route.is_api else page
        url = route.url(tenant="team-a", member="alice", ask=str(ask))
        name = route.pattern.name
        if name in LEADS_AND_ASKER and persona in ("carol", "victor"):
            assert client.get(url).status_code == 404, url
            continue
        # Pages for leads only (the request form) refuse members and viewers with 403: they
        # may know the tenant exists, unlike outsiders, who get 404 above.
        leads_only = route.pattern.name in LEADS_ONLY_PAGES and persona in ("carol", "victor")
        refused = leads_only or (admins_only(route) and persona != "admin")
        assert client.get(url).status_code == (403 if refused else 200), url


def test_the_tenants_list_never_includes_another_tenant(world):
    api, _ = _clients(world.bob)
    for query in (
        "",
        "?search=team-a",
        "?search=Team A",
        "?search=team",
        "?parent=team-a",
        "?state=active",
        "?page_size=200",
    ):
        response = api.get(f"/api/v1/tenants/{query}")
        assert response.status_code == 200
        assert "team-a" not in response.content.decode()
        assert [t["slug"] for t in response.json()["results"]] in ([], ["team-b"])


def test_filters_by_parent_do_not_reveal_children_of_invisible_tenants(world):
    Tenant.objects.filter(slug="team-c").update(parent=world.team_a)
    api, _ = _clients(world.bob)
    assert api.get("/api/v1/tenants/?parent=team-a").json()["results"] == []


def test_me_and_cluster_views_do_not_name_other_tenants(world):
    api, _ = _clients(world.bob)
    for url in ("/api/v1/me/", "/api/v1/clusters/demo-a100/", "/api/v1/clusters/demo-h100/"):
        response = api.get(url)
        assert response.status_code == 200
        text = response.content.decode()
        assert "team-a" not in text
        assert "team-c" not in text


def test_a_token_is_isolated_like_a_session(world):
    _, secret = api_token_create(user=world.bob)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert [t["slug"] for t in client.get("/api/v1/tenants/").json()["results"]] == ["team-b"]
    for url in ("/api/v1/tenants/team-a/", "/api/v1/tenants/team-a/quotas/"):
        response = client.get(url)
        assert response.status_code == 404
        assert "team-a" not in response.content.decode()


def test_the_portal_hides_other_tenants(world):
    _, page = _clients(world.bob)
    detail = page.get("/tenants/team-a/")
    assert detail.status_code == 404
    assert "team-a" not in detail.content.decode()
    home = page.get("/")
    assert home.status_code == 200
    assert "team-b" in home.content.decode()
    assert "team-a" not in home.content.decode()
    assert page.get("/console/").status_code == 403


def test_the_portal_shows_a_tenant_to_its_members(world):
    _, page = _clients(world.victor)
    response = page.get("/tenants/team-a/")
    assert response.status_code == 200
    assert "team-a-training" in response.content.decode()
