"""Browser harness: Playwright for Python driving Debian's chromium against ``live_server``.

No browser is ever downloaded: ``chromium_path()`` finds the system chromium (``CHROMIUM``
overrides); its absence skips these tests locally and fails them in CI (``REQUIRE_SERVICES=1``).

Two things about Playwright's sync API inside a Django test run:

* It runs an asyncio loop on a greenlet of the main thread, so from the moment it starts until
  it stops the main thread "has a running loop". Django then refuses ORM calls there unless
  ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set (the ORM calls are the test's own, never concurrent
  with the browser), and Django's per-thread database connections become per-context
  (asgiref's ``Local``): the test gets a *new* connection object, which lacks the snapshot
  ``serialized_rollback`` restores from, so ``serialized_rollback=True`` silently does nothing
  here. ``live_world`` therefore re-seeds the tier templates (a data migration, removed by the
  flush after every transactional test) itself.
* So Playwright must not outlive the browser tests: the chromium is shared by consecutive
  browser tests and stopped (closing the per-context connections, restoring the environment)
  as soon as the next test does not use it, so that later tests, and the processes they start
  (``check --deploy`` refuses ``DJANGO_ALLOW_ASYNC_UNSAFE``), see a normal process.

Every page a test opens goes through :class:`Browsing`, which records each request the page
makes and each console error; at teardown none may have gone to another host or been logged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connections

from tests.conftest import World, chromium_path, require_service
from tests.factories import PASSWORD

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 10_000
ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


class _Chromium:
    """The one chromium of the run, started for the first browser test and stopped as soon as
    the next test is not one (see the module docstring for why it must not outlive them)."""

    def __init__(self) -> None:
        self.playwright: Any = None
        self.browser: Any = None
        self.previous_async_unsafe: str | None = None

    def get(self) -> Any:
        if self.browser is not None:
            return self.browser
        path = chromium_path()
        require_service("chromium", bool(path), "no chromium on PATH (apt-get install chromium)")
        try:
            from playwright.sync_api import Error as PlaywrightError
            from playwright.sync_api import sync_playwright
        except ImportError as exc:  # a dev dependency; missing only in a partial install
            require_service("chromium", False, f"the playwright package is missing: {exc}")
            raise

        self.previous_async_unsafe = os.environ.get(ASYNC_UNSAFE)
        os.environ[ASYNC_UNSAFE] = "true"
        self.playwright = sync_playwright().start()
        try:
            self.browser = self.playwright.chromium.launch(
                executable_path=path, headless=True, args=CHROMIUM_ARGS
            )
        except PlaywrightError as exc:
            self.stop()
            require_service("chromium", False, f"{path} does not start: {exc.message}")
        return self.browser

    def stop(self) -> None:
        if self.playwright is None:
            return
        try:
            if self.browser is not None:
                self.browser.close()
        finally:
            connections.close_all()  # the per-context connections made while the loop "ran"
            self.playwright.stop()
            self.playwright = self.browser = None
            if self.previous_async_unsafe is None:
                os.environ.pop(ASYNC_UNSAFE, None)
            else:
                os.environ[ASYNC_UNSAFE] = self.previous_async_unsafe


_chromium = _Chromium()


@pytest.fixture
def browser() -> Any:
    """The shared headless chromium (a Playwright ``Browser``); tests open their own contexts."""
    return _chromium.get()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)  # the test's fixtures are torn down first
    finally:
        if nextitem is None or "browser" not in getattr(nextitem, "fixturenames", ()):
            _chromium.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run stopped early (``-x``, Ctrl-C) still stops chromium before the test databases go."""
    _chromium.stop()


@pytest.fixture
def live_world(transactional_db: None, live_server: Any, request: pytest.FixtureRequest) -> World:
    """The personas' world, committed, so that the live server's thread sees it."""
    return request.getfixturevalue("world")


@dataclass
class Browsing:
    """One browser context (its own cookies) on the live server, and what its pages did."""

    page: Any
    base_url: str
    requests: list[str] = field(default_factory=list)
    console_errors: list[tuple[str, str]] = field(default_factory=list)  # (text, source url)
    expected_error_urls: set[str] = field(default_factory=set)

    def goto(self, path: str, *, status: int = 200) -> Any:
        """Open ``path``; the final response (after redirects) must have ``status``."""
        url = self.base_url + path
        if status >= 400:
            # Chromium logs "Failed to load resource: ... 404" for an error page itself.
            self.expected_error_urls.add(url)
        response = self.page.goto(url)
        assert response is not None, f"no response for {url}"
        assert response.status == status, f"{url}: {response.status}, expected {status}"
        return response

    def log_in(self, username: str, password: str = PASSWORD) -> None:
        self.goto("/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        with self.page.expect_navigation():
            self.page.click("form button[type=submit]")

    def foreign_requests(self) -> list[str]:
        own = urlsplit(self.base_url).netloc
        return [
            url
            for url in self.requests
            if urlsplit(url).scheme not in ("data", "blob", "about") and urlsplit(url).netloc != own
        ]

    def unexpected_console_errors(self) -> list[str]:
        return [
            f"{text} ({url})"
            for text, url in self.console_errors
            if not (text.startswith("Failed to load resource") and url in self.expected_error_urls)
        ]

    def assert_clean(self) -> None:
        assert self.foreign_requests() == [], "the page made requests to another host"
        assert self.unexpected_console_errors() == [], "the page logged console errors"


@pytest.fixture
def browse(browser: Any, live_server: Any) -> Iterator[Callable[[], Browsing]]:
    """``browse()`` -> a fresh :class:`Browsing` (new context, no cookies) on the live server.

    At teardown, no page of any browsing may have requested another host or logged an error.
    """
    opened: list[tuple[Any, Browsing]] = []

    def open_browsing() -> Browsing:
        context = browser.new_context()
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        browsing = Browsing(page=page, base_url=live_server.url)
        page.on("request", lambda request: browsing.requests.append(request.url))

        def on_console(message: Any) -> None:
            if message.type == "error":
                browsing.console_errors.append((message.text, message.location.get("url", "")))

        page.on("console", on_console)
        page.on("pageerror", lambda exc: browsing.console_errors.append((f"page error: {exc}", "")))
        opened.append((context, browsing))
        return browsing

    yield open_browsing
    for context, _ in opened:
        context.close()
    for _, browsing in opened:
        browsing.assert_clean()


@pytest.fixture(autouse=True)
def _logins_unthrottled(settings):  # type: ignore[no-untyped-def]
    """The browser tests log in a few times a minute from one address, more than the login
    throttle lets a sprayer have (tests/security/test_anonymous_abuse.py checks that limit)."""
    settings.LOGIN_THROTTLE_RATE = "10000/min"
