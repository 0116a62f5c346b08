"""The tenant-isolation sweep: alice (lead of team-a) asks for team-b's objects on every route
of the URL conf, by id, by slug, in list filters, in nested routes and in exports.

* A route that takes an id or slug of something a tenant owns answers 404 for team-b's
  object, exactly as it answers for an object that does not exist (no oracle), with nothing
  of team-b in the body; writes change nothing in the database.
* Routes for platform admins answer 403 to a lead, the agent's routes 401/403 (400 without a
  join token), whatever the id; a page that checks the role first may answer 403 too, but the
  same 403 for team-b's object as for one that does not exist.
* Every page and endpoint alice may read, with team-b named in its filters, shows exactly
  what it shows for a tenant that does not exist, and nothing of team-b ever.

The routes and their parameters come from the URL conf (``routes.py``); a parameter nobody
classified fails, and every path of the OpenAPI document must be among the routes swept.
Writes on routes without an id that can name a tenant's object in their body are listed in
``BODY_REFERENCES``; a new one fails until someone says how it can.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection
from django.http import HttpResponseBase
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from tests.isolation.routes import AGENT_PREFIX, Kind, Route, all_routes
from tests.isolation.world import MISSING_PK, MISSING_SLUG, THEIR_SECRETS, Side

ROUTES = all_routes()


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
    owned = {_qualified(r) for r in ROUTES if any(s.kind is Kind.OWNED for s in r.samples.values())}
    assert {
        "tenant-detail", "tenant-usage", "tenant-suggestions", "tenant-sync-manifests",
        "tenant-member-detail", "quota-request-detail", "quota-request-approve",
        "quota-request-what-if", "quota-request-dry-run", "api-token-detail",
        "portal:tenant-detail", "portal:tenant-cluster-manifests", "portal:request-detail",
        "portal:request-status", "portal:request-retry", "portal:request-revert", "portal:inbox-read", "alert-detail", "alert-acknowledge",
        "portal:alert-acknowledge", "tenant-profile", "portal:tenant-showback",
        "tenant-admission-check",
    } - {n.removeprefix("api:") for n in owned} == set()  # fmt: skip


# --- helpers -------------------------------------------------------------------------------


def _client(route: Route, user: Any) -> APIClient | Client:
    """An API client (authenticated as ``user``) for the API, a browser session for pages."""
    if route.is_api:
        api = APIClient()
        api.force_authenticate(user)
        return api
    page = Client()
    page.force_login(user)
    return page


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
    """team-b's secrets found in text as words: a random CSRF token that happens to hold
    "bob" is not a leak (it made the sweep fail now and then)."""
    text = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", text)
    return [
        secret
        for secret in THEIR_SECRETS
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", text)
    ]


def _project_tables() -> list[str]:
    tables = set()
    for config in apps.get_app_configs():
        if not str(config.path).startswith(str(settings.BASE_DIR)) or ".venv" in config.path:
            continue
        for model in config.get_models(include_auto_created=True):
            if model._meta.managed and not model._meta.proxy:
                tables.add(model._meta.db_table)
    return sorted(tables)


def _database_state() -> str:
    """A digest of every row of the project's own apps (one query on PostgreSQL)."""
    tables = _project_tables()
    if connection.vendor == "postgresql":
        digests = [
            f"(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) "  # noqa: S608  # table names from the models
            f'FROM "{table}" t)'
            for table in tables
        ]
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + " || ".join(digests))
            return str(cursor.fetchone()[0])
    digest = hashlib.sha256()
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608  # names from the models
            digest.update(repr((table, sorted(map(repr, cursor.fetchall())))).encode())
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
# Pages whose POST the view refuses to non-admins itself (the cluster page reads for everyone).
ROLE_FIRST = {"portal:request-approve", "portal:request-reject", "portal:cluster-detail"}

# Asking to join a team (issue 33): any signed-in person given a team's slug asks to join it,
# so team-b's slug answers there (the join form, alice's own asks to it: none; an ask sent)
# where a slug that names no team answers 404. The slug alice typed is all of team-b shown.
JOINABLE = {"api:tenant-join-request-list", "portal:tenant-join"}

EXPECTED = {
    Kind.OWNED: {404},
    Kind.ADMIN: {403},
    Kind.AGENT: {400, 401, 403},  # 400: registering takes a join token in the body
}


def _expected(route: Route, method: str) -> set[int]:
    kind = route.kind(method)
    if _qualified(route) in ROLE_FIRST and method == "post":
        return {403}
    if kind is Kind.ADMIN and not route.is_api:
        return {403, 302}  # pages: refused, or sent to log in
    return EXPECTED.get(kind, set())


# --- by id, by slug, nested --------------------------------------------------------------

# The switches that make a page compute more or export: the request page's what-if replay,
# the dashboards' CSV downloads.
VIEWS = ["", "?what_if=1", "?download=csv"]

WITH_IDS = [r for r in ROUTES if r.params]


@pytest.mark.parametrize("route", WITH_IDS, ids=_id)
def test_alice_gets_nothing_of_team_b_by_id_or_slug(iso, route):
    client = _client(route, iso.alice)
    before = _database_state()
    answered = 0
    calls = [(m, "") for m in route.methods]
    calls += [("get", view) for view in VIEWS[1:] if "get" in route.methods]
    for method, view in calls:
        body = BODIES.get(_qualified(route), {})
        theirs = _send(client, method, route.url(iso, iso.theirs) + view, body)
        missing = _send(client, method, route.url(iso, None) + view, body)
        where = (method, route.url(iso, iso.theirs) + view)
        text = _text(theirs)
        if _qualified(route) in JOINABLE:
            slug = iso.theirs.tenant.slug
            assert [s for s in _leaks(text) if s != slug] == [], (where, text[:2000])
            assert theirs.status_code < 400, (where, theirs.status_code, text[:2000])
            assert missing.status_code == 404, where
            answered += 1
            continue
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
    if _qualified(route) in JOINABLE:
        return  # alice's own ask to join team-b: hers to send
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
    client = _client(route, iso.admin)
    if route.kind("get") not in (Kind.OWNED, Kind.ADMIN):
        return
    response = client.get(route.url(iso, iso.theirs))
    assert response.status_code in (200, 405), (route.url(iso, iso.theirs), response.status_code)


# --- in filters, in exports, anywhere alice may read --------------------------------------

# List filters naming team-b (x: its slug, pk: its request), or a tenant that does not exist.
FILTERS: list[tuple[str, Callable[[str, str], dict[str, str]]]] = [
    ("tenant", lambda x, pk: {"tenant": x}),
    ("cluster+tenant", lambda x, pk: {"cluster": "demo-a100", "tenant": x}),
    ("search", lambda x, pk: {"search": x, "q": x}),
    ("parent", lambda x, pk: {"parent": x}),
    ("slug", lambda x, pk: {"tenant_slug": x, "slug": x}),
    ("object-id", lambda x, pk: {"object_id": f"#{pk}", "request": pk, "id": pk}),
]
# The OpenAPI document and its viewer describe the API from the code: no tenant data in them
# (and generating the document is the slowest request there is).
DESCRIBING_THE_API = {"api:schema", "api:docs"}
READABLE = [r for r in ROUTES if "get" in r.methods and _qualified(r) not in DESCRIBING_THE_API]
# Routes that refuse alice whatever she asks (admins', agents') have nothing to filter.
MACHINE_ENDPOINTS = {"portal:metrics"}  # Prometheus: a bearer token or networks, not users
FILTERABLE = [
    r
    for r in READABLE
    if not r.route.startswith(("api/v1/agent/", "console/", "fleet/"))
    and _qualified(r) not in MACHINE_ENDPOINTS
]


@pytest.mark.parametrize("route", READABLE, ids=_id)
def test_alices_own_pages_and_lists_never_show_team_b(iso, route):
    """Every page and endpoint alice may GET, on her own objects: nothing of team-b in it.
    This is where aggregates, exports (CSV, YAML) and "other tenants" panels would leak."""
    client = _client(route, iso.alice)
    for view in VIEWS:
        url = route.url(iso, iso.ours) + view
        response = client.get(url)
        text = _text(response)
        assert response.status_code < 500, (url, text[:2000])
        assert _leaks(text) == [], (url, text[:3000])
        if route.kind("get") is Kind.OWNED and not view:
            assert response.status_code in (200, 405), (url, response.status_code, text[:2000])
        if route.kind("get") is Kind.ADMIN:  # 405: a POST-only page
            assert response.status_code in _expected(route, "get") | {405}, (url, response)


@pytest.mark.parametrize("route", FILTERABLE, ids=_id)
def test_naming_team_b_in_a_filter_shows_what_a_missing_tenant_shows(iso, route):
    if route.kind("get") is Kind.ADMIN:
        return  # refused (403) whatever the query: nothing to filter
    client = _client(route, iso.alice)
    url = route.url(iso, iso.ours)
    their_pk = str(iso.theirs.requests["pending"].pk)
    for name, make_query in FILTERS:
        theirs = client.get(f"{url}?{urlencode(make_query(iso.theirs.tenant.slug, their_pk))}")
        missing = client.get(f"{url}?{urlencode(make_query(MISSING_SLUG, MISSING_PK))}")
        where = (url, name)
        text = _text(theirs)
        assert theirs.status_code < 500, (where, text[:2000])
        if theirs.status_code == 403:  # only a refusal that does not depend on the filter
            assert client.get(url).status_code == 403, (where, text[:2000])
        assert theirs.status_code == missing.status_code, where
        # What alice typed may be echoed back (a filter form); nothing else of team-b may show.
        echoed = _normalised(_text(missing)).replace(MISSING_SLUG, iso.theirs.tenant.slug)
        echoed = echoed.replace(MISSING_PK, their_pk)
        assert _normalised(text) == echoed, (where, text[:3000])
        assert [s for s in _leaks(text) if s != iso.theirs.tenant.slug] == [], (where, text[:3000])


# --- writes that name team-b's objects in the body ---------------------------------------


def _filing(slug: str) -> dict[str, Any]:
    return {
        "tenant": slug,
        "cluster": "demo-a100",
        "reason": "Stolen",
        "items": [
            {"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "guaranteed": "4", "limit": "6"}
        ],
    }


# Writes on routes without an id in the URL that can still name a tenant's object in their
# body: (route, method) -> (body naming side's object (None: one that does not exist), what
# alice gets for team-b's). A new write on such a route must be added here or below.
BODY_REFERENCES: dict[tuple[str, str], tuple[Callable[[Side | None], dict[str, Any]], int]] = {
    ("api:quota-request-list", "post"): (
        lambda side: _filing(side.tenant.slug if side else MISSING_SLUG),
        404,
    ),
    ("api:quota-request-validate", "post"): (
        lambda side: _filing(side.tenant.slug if side else MISSING_SLUG),
        404,
    ),
    ("api:notification-mark-read", "post"): (
        lambda side: {"ids": [side.notification.pk if side and side.notification else 0]},
        200,
    ),
}
# Writes that name nobody's objects: credentials, a MIG layout check, the session.
NO_TENANT_REFERENCE = {
    ("api:token-obtain", "post"),
    ("api:mig-validate", "post"),
    ("portal:login", "post"),
    ("portal:login", "put"),
    ("portal:logout", "post"),
    ("portal:inbox-read-all", "post"),  # the caller's own inbox (checked: bob's stays unread)
    ("portal:home", "post"),  # pages that only read: a POST renders them like a GET
    ("portal:request-list", "post"),
    ("portal:cluster-detail", "post"),  # a cluster's enforcement mode: no tenant's object
}
WRITES = [
    pytest.param(route, method, id=f"{_qualified(route)}-{method}")
    for route in ROUTES
    if not any(s.kind is Kind.OWNED for s in route.samples.values())
    and _qualified(route) not in DESCRIBING_THE_API
    for method in route.methods
    if method != "get"
]


@pytest.mark.parametrize(("route", "method"), WRITES)
def test_writes_naming_team_b_in_the_body_change_nothing(iso, route, method):
    client = _client(route, iso.alice)
    key = (_qualified(route), method)
    before = _database_state()
    unread = iso.theirs.notification.read_at  # type: ignore[union-attr]
    if key in BODY_REFERENCES:
        make_body, status = BODY_REFERENCES[key]
        theirs = _send(client, method, route.url(iso, iso.theirs), make_body(iso.theirs))
        missing = _send(client, method, route.url(iso, None), make_body(None))
        text = _text(theirs)
        assert theirs.status_code == status, (key, text[:2000])
        assert (missing.status_code, _normalised(_text(missing))) == (
            theirs.status_code,
            _normalised(text),
        ), key
        assert _leaks(text) == [], (key, text[:2000])
        assert _database_state() == before, key
        return
    response = _send(client, method, route.url(iso, iso.theirs), {})
    text = _text(response)
    assert _leaks(text) == [], (key, text[:2000])
    expected = _expected(route, method)
    if expected:  # for platform admins or node agents only
        assert response.status_code in expected, (key, response.status_code, text[:2000])
        assert _database_state() == before, key
    elif response.status_code != 405:
        assert key in NO_TENANT_REFERENCE, (
            f"say how {key} can name another tenant's objects: add it to BODY_REFERENCES "
            "(with a body naming team-b's) or to NO_TENANT_REFERENCE in tests/isolation/"
            "test_sweep.py"
        )
    iso.theirs.notification.refresh_from_db()  # type: ignore[union-attr]
    assert iso.theirs.notification.read_at == unread  # type: ignore[union-attr]
