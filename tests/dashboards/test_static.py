"""Static files a person waits for: the pages draw with the small plotly.js bundle, which has
every trace type the charts use, and the hashed files go out compressed with a long-lived
cache header through the WSGI application (WhiteNoise), as in production."""

from __future__ import annotations

import ast
import gzip
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline
import pytest
from django.conf import settings
from django.contrib.staticfiles.storage import staticfiles_storage
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client, override_settings
from plotly.basedatatypes import BaseTraceType

from dashboards import charts
from dashboards.staticfiles import PLOTLY_FILE, PLOTLY_JS_VERSION, bundle_trace_types

CHART_PAGES = (  # the pages plotly.js draws (the tenant usage page's come drawn: test_svg.py)
    "/tenants/team-a/profile/",
    "/usage/?range=7d",
    "/showback/",
)


def _trace_types_in_source() -> set[str]:
    """Every trace type the chart code builds: the ``go.<Trace>`` classes it names."""
    tree = ast.parse(Path(charts.__file__).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id != "go":
                continue
            named = getattr(go, node.attr)
            if isinstance(named, type) and issubclass(named, BaseTraceType):
                found.add(named().type)
    return found


def test_the_bundle_draws_every_trace_type_the_charts_emit(usage_data: Any) -> None:
    in_bundle = bundle_trace_types()
    assert in_bundle  # the bundle was read: its trace modules are named
    in_source = _trace_types_in_source()
    assert {"scatter", "bar", "heatmap"} <= in_source
    assert in_source <= in_bundle, in_source - in_bundle
    # And what the pages hand to plotly.js on real data.
    admin = Client()
    admin.force_login(usage_data.world.admin)
    drawn = set()
    for url in CHART_PAGES:
        page = admin.get(url).content.decode()
        assert "dashboards/plotly-cartesian.min.js" in page, url
        assert "plotly.min.js" not in page, url  # not the full 4.8 MB bundle
        match = re.search(r'<script id="dashboard-charts" type="application/json">(.*?)</script>',
                          page, re.S)  # fmt: skip
        if match:
            for figure in json.loads(match.group(1)).values():
                drawn |= {trace.get("type", "scatter") for trace in figure["data"]}
    assert "heatmap" in drawn and drawn <= in_bundle


def test_the_vendored_bundle_is_the_pinned_cartesian_one_with_its_license() -> None:
    head = PLOTLY_FILE.read_bytes()[:200].decode()
    assert f"plotly.js (cartesian - minified) v{PLOTLY_JS_VERSION}" in head
    assert "Licensed under the MIT license" in head
    assert (PLOTLY_FILE.parent / "plotly-cartesian.LICENSE.txt").is_file()
    assert PLOTLY_FILE.stat().st_size < 2_000_000  # the full bundle is 4.8 MB


def test_the_python_checks_use_the_schema_of_the_vendored_bundle() -> None:
    # plotly (Python) checks the charts' properties against the plotly.js it was built with:
    # the one the pages load, or a property one has and the other lacks passes unnoticed.
    assert plotly.offline.get_plotlyjs_version() == PLOTLY_JS_VERSION


def _wsgi_get(path: str, accept_encoding: str) -> tuple[str, dict[str, str], bytes]:
    from django.core.handlers.wsgi import WSGIHandler

    app = WSGIHandler()  # the middleware (WhiteNoise) as the settings in force name it
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Callable:
        answer["status"], answer["headers"] = status, dict(headers)
        return lambda data: None

    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
        "SERVER_NAME": "testserver", "SERVER_PORT": "80", "HTTP_HOST": "testserver",
        "HTTP_ACCEPT_ENCODING": accept_encoding, "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(), "wsgi.errors": io.StringIO(),
    }  # fmt: skip
    # As Django's test client does: the request's signals would close the test's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        body = b"".join(app(environ, start_response))
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return answer["status"], answer["headers"], body


@pytest.mark.parametrize("debug", [False, True], ids=["production", "make-run"])
def test_hashed_static_files_are_served_compressed_and_cached_for_good(
    tmp_path: Path, debug: bool
) -> None:
    # collectstatic with the storage production uses (and DEBUG, as make run does); only the
    # dashboards' folder, to keep the test short.
    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "dashboards.staticfiles.HashedStaticFilesStorage"},
    }
    folder = Path(settings.BASE_DIR) / "dashboards" / "static"
    with override_settings(
        STORAGES=storages,
        STATIC_ROOT=tmp_path,
        STATICFILES_DIRS=[folder],
        STATICFILES_FINDERS=["django.contrib.staticfiles.finders.FileSystemFinder"],
        WHITENOISE_USE_FINDERS=debug,
        WHITENOISE_AUTOREFRESH=debug,
        DEBUG=debug,
    ):
        call_command("collectstatic", interactive=False, verbosity=0)
        url = staticfiles_storage.url("dashboards/plotly-cartesian.min.js")
        assert re.fullmatch(r"/static/dashboards/plotly-cartesian\.min\.[0-9a-f]{12}\.js", url)
        original = PLOTLY_FILE.read_bytes()

        status, headers, body = _wsgi_get(url, "gzip, deflate")
        assert status.startswith("200")
        assert headers["Content-Encoding"] == "gzip"
        cache = headers["Cache-Control"]
        assert "immutable" in cache
        assert int(re.search(r"max-age=(\d+)", cache).group(1)) >= 31_536_000  # a year at least
        assert gzip.decompress(body) == original
        assert len(body) < len(original) / 2

        status, headers, body = _wsgi_get(url, "br, gzip")
        assert headers["Content-Encoding"] == "br"  # smaller still (the Brotli package)
        assert len(body) < len(original) / 3

        status, headers, body = _wsgi_get(url, "")  # a client that takes no encoding
        assert "Content-Encoding" not in headers and body == original
