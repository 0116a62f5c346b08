"""CSRF: every page and every session-authenticated API route refuses a POST without a token.

The routes come from the URL conf (``tests/security/routes.py``), so a page added later is
covered without anyone remembering to add it here. The client is signed in as a platform admin
(who may do everything), so the only reason left to refuse is the missing token.
"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authentication import SessionAuthentication
from rest_framework.test import APIClient

from tests.security.routes import Route, all_routes

ROUTES = all_routes()
# Pages that take no state-changing request, and say so by refusing POST before CSRF matters:
# none. (CsrfViewMiddleware runs before any view, so even a GET-only view answers 403 here.)
CSRF_EXEMPT_PAGES: set[str] = set()


def _session_api(route: Route) -> bool:
    """An API route that a browser session may call (agents' and token routes take none)."""
    view_class = getattr(route.pattern.callback, "cls", None)
    if view_class is None:
        return False
    classes = getattr(view_class, "authentication_classes", ())
    return any(issubclass(c, SessionAuthentication) for c in classes)


PAGES = [r for r in ROUTES if not r.is_api and r.url() not in CSRF_EXEMPT_PAGES]
SESSION_API = [r for r in ROUTES if r.is_api and _session_api(r)]


def test_the_sweep_covers_pages_admin_and_the_api():
    names = {r.name for r in PAGES}
    assert {"login", "request-approve", "inbox-read-all", "fleet-gpu-layout"} <= names
    assert any(r.is_django_admin for r in PAGES)
    assert {"tenant-list", "quota-request-approve", "token-obtain"} & {
        r.name for r in SESSION_API
    } >= {"tenant-list", "quota-request-approve"}
    assert "token-obtain" not in {r.name for r in SESSION_API}  # no session, nothing to ride


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_every_page_refuses_a_write_without_a_csrf_token(world, method):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.admin)
    for route in PAGES:
        url = route.url()
        response = getattr(client, method)(url, {"comment": "x"})
        assert response.status_code == 403, (method, url, response.status_code)
        assert b"CSRF" in response.content, (method, url)


def test_a_page_accepts_the_same_post_with_the_token(world):
    """The other side: the refusal above is the missing token, not the page."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.admin)
    client.get("/inbox/")
    token = client.cookies["csrftoken"].value
    response = client.post("/inbox/read/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302


def test_the_login_form_refuses_a_post_without_a_csrf_token(world):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/login/", {"username": "alice", "password": "x"})
    assert response.status_code == 403


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_every_session_api_route_refuses_a_write_without_a_csrf_token(world, method):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.admin)
    checked = 0
    for route in SESSION_API:
        url = route.url()
        response = getattr(client, method)(url, {}, format="json")
        if response.status_code == 405:  # the route takes no such method at all
            continue
        assert response.status_code == 403, (method, url, response.status_code)
        if "html" not in response["Content-Type"]:  # the docs page answers with the 403 page
            assert b"CSRF" in response.content, (method, url)
        checked += 1
    assert checked >= 3
