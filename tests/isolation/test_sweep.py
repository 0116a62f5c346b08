"""The tenant-isolation sweep: alice (lead of team-a) asks for team-b's objects on every route
of the URL conf, by id, by slug, in list filters, in nested routes and in exports.

* A route that takes an id or slug of something a tenant owns answers 404 for team-b's
  object, exactly as it answers for an object that does not exist (no oracle), with nothing
  of team-b in the body; writes change nothing in the database.
* Routes for platform admins answer 403 to a lead, the agent's routes 401/403, whatever the id.
* Every page and endpoint alice may read, with team-b named in its filters, shows exactly
  what it shows for a tenant that does not exist, and nothing of team-b ever.

The routes and their parameters come from the URL conf (``routes.py``); a parameter nobody
classified fails, and every path of the OpenAPI document must be among the routes swept.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.conf import settings
from django.http import HttpResponseBase
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from tests.isolation.routes import AGENT_PREFIX, Kind, Route, all_routes
from tests.isolation.world import MISSING_PK, MISSING_SLUG, THEIR_SECRETS, IsoWorld, Side

ROUTES = all_routes()
BY_NAME = {r.name: r for r in ROUTES}


def _id(route: Route) -> str:
    return _qualified(route)


# --- what is swept -----------------------------------------------------------------------


def test_every_route_parameter_has_a_sample():
    unknown = []
    for route in ROUTES:
        try:
            route.samples  # noqa: B018  # computing them is the check
        except LookupError as exc:
            unknown.append(str(exc))
    assert unknown == []


def test_every_path_of_the_openapi_document_is_swept():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = {re.sub(r"\{[^}]+\}", "{}", path) for path in schema["paths"]}
    swept = {r.openapi_path() for r in ROUTES if r.is_api}
    assert documented - swept == set()
    assert len(documented) >= 40


def test_the_sweep_sees_the_routes_that_take_a_tenants_objects():
    owned = {
        _qualified(r) for r in ROUTES if any(s.kind is Kind.OWNED for s in r.samples.values())
    }
    assert {
        "tenant-detail", "tenant-usage", "tenant-suggestions", "tenant-sync-manifests",
        "tenant-member-detail", "quota-request-detail", "quota-request-approve",
        "quota-request-what-if", "quota-request-dry-run", "api-token-detail",
        "portal:tenant-detail", "portal:tenant-cluster-manifests", "portal:request-detail",
        "portal:request-retry", "portal:inbox-read",
    } - {n.removeprefix("api:") for n in owned} == set()  # fmt: skip


# --- helpers -------------------------------------------------------------------------------


def _clients(world: IsoWorld, user: Any) -> tuple[APIClient, Client]:
    api = APIClient()
    api.force_authenticate(user)
    page = Client()
    page.force_login(user)
    return api, page


def _send(client: Any, method: str, url: str, body: dict[str, Any]) -> HttpResponseBase:
    if isinstance(client, APIClient):
        return getattr(client, method)(url, body or None, format="json")  # type: ignore[no-any-return]
    return getattr(client, method)(url, body)  # type: ignore[no-any-return]


def _text(response: HttpResponseBase) -> str:
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    else:
        content = response.content  # type: ignore[attr-defined]
    return content.decode(errors="replace")  # type: ignore[no-any-return]


_TIMES = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d| UTC)?")


def _normalised(text: str) -> str:
    """Without what differs between two calls made a moment apart: the CSRF token (masked
    differently every time) and the time of reading."""
    text = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", text)
    return _TIMES.sub("<time>", text)


def _leaks(text: str) -> list[str]:
    return [secret for secret in THEIR_SECRETS if secret in text]


def _database_state() -> str:
    """A digest of every row of the project's own apps."""
    digest = hashlib.sha256()
    for config in apps.get_app_configs():
        if not str(config.path).startswith(str(settings.BASE_DIR)) or ".venv" in config.path:
            continue
        for model in config.get_models():
            rows = model._default_manager.order_by("pk").values_list()
            digest.update(repr((model._meta.label, list(rows))).encode())
    return digest.hexdigest()


# Bodies a caller with the right role could send successfully, so that the only reason left
# to refuse alice is isolation.
BODIES: dict[str, dict[str, Any]] = {
    "api:tenant-detail": {"display_name": "Stolen"},
    "api:tenant-namespace-list": {"name": "stolen-namespace"},
    "api:tenant-member-list": {"username": "alice", "role": "lead"},
    "api:tenant-member-detail": {"role": "viewer"},
    "api:quota-request-approve": {"comment": "fine"},
    "api:quota-request-reject": {"comment": "no"},
    "portal:request-approve": {"comment": "fine"},
    "portal:request-reject": {"comment": "no"},
}

# Pages that check the caller's role before they look the object up: a lead gets the same 403
# for any id, team-b's or one that does not exist (checked below), which confirms nothing.
ROLE_FIRST = {"portal:request-approve", "portal:request-reject"}

EXPECTED = {
    Kind.OWNED: {404},
    Kind.ADMIN: {403},
    Kind.AGENT: {401, 403},
}


def _expected(route: Route, method: str) -> set[int]:
    kind = route.kind(method)
    if _qualified(route) in ROLE_FIRST and method == "post":
        return {403}
    if kind is Kind.ADMIN and not route.is_api:
        return {403, 302}  # pages: refused, or sent to log in
    return EXPECTED.get(kind, set())


# --- by id, by slug, nested --------------------------------------------------------------

WITH_IDS = [r for r in ROUTES if r.params]


@pytest.mark.parametrize("route", WITH_IDS, ids=_id)
def test_alice_gets_nothing_of_team_b_by_id_or_slug(iso, route):
    api, page = _clients(iso, iso.alice)
    client = api if route.is_api else page
    before = _database_state()
    answered = 0
    for method in route.methods:
        body = BODIES.get(_qualified(route), {})
        theirs = _send(client, method, route.url(iso, iso.theirs), body)
        missing = _send(client, method, route.url(iso, None), body)
        where = (method, route.url(iso, iso.theirs))
        text = _text(theirs)
        assert _leaks(text) == [], (where, text[:2000])
        if theirs.status_code == missing.status_code == 405:
            continue  # a method the route does not offer
        answered += 1
        expected = _expected(route, method)
        if expected:
            assert theirs.status_code in expected, (where, theirs.status_code, text[:2000])
        else:  # shared objects: alice reads them like anyone
            assert theirs.status_code < 400, (where, theirs.status_code, text[:2000])
        # ...and exactly what an object that does not exist answers: no oracle
        assert missing.status_code == theirs.status_code, where
        if expected:
            assert _normalised(_text(missing)) == _normalised(text), where
    assert answered, route.route
    assert _database_state() == before, "a write to team-b's objects changed the database"


def _qualified(route: Route) -> str:
    return f"{'api' if route.is_api else 'portal'}:{route.pattern.name}"


@pytest.mark.parametrize(
    "route",
    [r for r in WITH_IDS if "get" in r.methods and not r.route.startswith(AGENT_PREFIX)],
    ids=_id,
)
def test_the_samples_are_real_objects_an_admin_can_read(iso, route):
    """The other side of the coin: team-b's objects used above exist and can be read by those
    who may, so the 404s above come from isolation, not from a wrong id."""
    api, page = _clients(iso, iso.admin)
    client = api if route.is_api else page
    if route.kind("get") not in (Kind.OWNED, Kind.ADMIN):
        return
    response = client.get(route.url(iso, iso.theirs))
    assert response.status_code in (200, 405), (route.url(iso, iso.theirs), response.status_code)


# --- in filters, in exports, anywhere alice may read --------------------------------------

FILTERS = [
    pytest.param(lambda x, pk: {"tenant": x}, id="tenant"),
    pytest.param(lambda x, pk: {"cluster": "demo-a100", "tenant": x}, id="cluster+tenant"),
    pytest.param(lambda x, pk: {"search": x}, id="search"),
    pytest.param(lambda x, pk: {"parent": x}, id="parent"),
    pytest.param(lambda x, pk: {"tenant_slug": x, "slug": x}, id="slug"),
    pytest.param(lambda x, pk: {"object_id": f"#{pk}", "request": pk, "id": pk}, id="object-id"),
]
READABLE = [r for r in ROUTES if "get" in r.methods]
# Routes that refuse alice whatever she asks (admins', agents') have nothing to filter.
MACHINE_ENDPOINTS = {"portal:metrics"}  # Prometheus: a bearer token or networks, not users
FILTERABLE = [
    r
    for r in READABLE
    if not r.route.startswith(("api/v1/agent/", "console/", "fleet/"))
    and _qualified(r) not in MACHINE_ENDPOINTS
]


# The switches that make a page compute more or export: the request page's what-if replay,
# the dashboards' CSV downloads.
VIEWS = ["", "?what_if=1", "?download=csv"]


@pytest.mark.parametrize("view", VIEWS, ids=["plain", "what-if", "csv"])
@pytest.mark.parametrize("route", READABLE, ids=_id)
def test_alices_own_pages_and_lists_never_show_team_b(iso, route, view):
    """Every page and endpoint alice may GET, on her own objects: nothing of team-b in it.
    This is where aggregates, exports (CSV, YAML) and "other tenants" panels would leak."""
    api, page = _clients(iso, iso.alice)
    client = api if route.is_api else page
    url = route.url(iso, iso.ours) + view
    response = client.get(url)
    text = _text(response)
    assert response.status_code < 500, (url, text[:2000])
    assert _leaks(text) == [], (url, text[:3000])
    if route.kind("get") is Kind.OWNED and not view:
        assert response.status_code in (200, 405), (url, response.status_code, text[:2000])


@pytest.mark.parametrize("make_query", FILTERS)
@pytest.mark.parametrize("route", FILTERABLE, ids=_id)
def test_naming_team_b_in_a_filter_shows_what_a_missing_tenant_shows(iso, route, make_query):
    if route.kind("get") is Kind.ADMIN:
        return  # refused (403) whatever the query: nothing to filter
    api, page = _clients(iso, iso.alice)
    client = api if route.is_api else page
    url = route.url(iso, iso.ours)
    their_pk = str(iso.theirs.requests["pending"].pk)
    theirs = client.get(f"{url}?{urlencode(make_query(iso.theirs.tenant.slug, their_pk))}")
    missing = client.get(f"{url}?{urlencode(make_query(MISSING_SLUG, MISSING_PK))}")
    text = _text(theirs)
    assert theirs.status_code < 500, (url, text[:2000])
    if theirs.status_code == 403:  # only a refusal that does not depend on the filter
        assert client.get(url).status_code == 403, (url, text[:2000])
    assert theirs.status_code == missing.status_code, url
    # What alice typed may be echoed back (a filter form); nothing else of team-b may show.
    echoed = _normalised(_text(missing)).replace(MISSING_SLUG, iso.theirs.tenant.slug)
    echoed = echoed.replace(MISSING_PK, their_pk)
    assert _normalised(text) == echoed, (url, text[:3000])
    assert [s for s in _leaks(text) if s != iso.theirs.tenant.slug] == [], (url, text[:3000])
