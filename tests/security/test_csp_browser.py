"""The Content-Security-Policy in a real browser: chromium reports every violation as a console
error, and the ``browse`` fixture (tests/e2e/conftest.py) fails a test on any console error.
So opening the main pages, Django admin and the API docs with the policy on proves that nothing
they need is blocked, and the injected inline script proves violations would be seen."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Browsing

pytestmark = [pytest.mark.e2e]

PAGES = ["/", "/tenants/team-a/", "/requests/", "/inbox/", "/console/", "/fleet/", "/admin/"]


def test_main_pages_and_the_api_docs_run_under_the_policy(live_world: Any, browse: Any) -> None:
    admin: Browsing = browse()
    admin.log_in("admin")
    for path in PAGES:
        response = admin.goto(path)
        assert "script-src 'self'" in response.headers["content-security-policy"], path
    admin.goto("/api/v1/docs/")
    # Swagger UI rendered the document: its operations are on the page.
    admin.page.wait_for_selector(".opblock", timeout=10_000)
    assert admin.page.locator(".opblock").count() > 10
    lead = browse()
    lead.log_in("alice")
    lead.goto("/tenants/team-a/requests/new/")


def test_an_inline_script_would_be_blocked_and_seen(live_world: Any, browse: Any) -> None:
    visitor = browse()
    visitor.goto("/login/")
    visitor.page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__ran = true'; document.body.appendChild(s); }"
    )
    assert visitor.page.evaluate("() => window.__ran === true") is False
    violations = [t for t, _ in visitor.console_errors if "Content Security Policy" in t]
    assert violations, visitor.console_errors
    visitor.console_errors.clear()  # seen and expected; the fixture checks the rest
