"""Static files for the pages: the plotly.js bundle the dashboards draw with, and the storage
that serves every static file hashed and compressed.

plotly.js: the ``plotly.js-cartesian-dist-min`` npm package (pinned below, MIT, its license
header kept in the file and its LICENSE beside it) vendored as
``dashboards/static/dashboards/plotly-cartesian.min.js``: 1.5 MB instead of the full 4.8 MB
bundle, and the smallest of plotly's prebuilt bundles with every trace type the charts use
(``dashboards.charts`` draws scatter, bar and heatmap; the "basic" bundle has no heatmap).
``bundle_trace_types`` reads the trace modules a bundle registers; a test checks the charts'
against it. To update: ``npm pack plotly.js-cartesian-dist-min@X.Y.Z`` and copy the file, with
the Python ``plotly`` release built on the same plotly.js (its checks use that schema; a test
compares the two versions).

Storage: ``collectstatic`` writes hashed names with gzip and brotli copies
(``CompressedManifestStaticFilesStorage``), which WhiteNoise serves with ``Cache-Control:
max-age=315360000, public, immutable`` (ten years: the name changes with the content) and
``Content-Encoding`` as the browser accepts. ``HashedStaticFilesStorage`` does the same under
DEBUG (``make run``), where Django's storage would name the unhashed files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from whitenoise.storage import CompressedManifestStaticFilesStorage

PLOTLY_JS_VERSION = "4.1.1"
PLOTLY_STATIC_PATH = "dashboards/plotly-cartesian.min.js"
PLOTLY_FILE = Path(__file__).resolve().parent / "static" / PLOTLY_STATIC_PATH
# How a minified plotly.js bundle registers a trace module: {..., moduleType:"trace",name:"bar"
_TRACE_MODULE = re.compile(rb'moduleType:"trace",name:"([a-z0-9]+)"')


def bundle_trace_types(path: Path = PLOTLY_FILE) -> set[str]:
    """The trace types a plotly.js bundle can draw (the trace modules it registers)."""
    return {name.decode() for name in _TRACE_MODULE.findall(path.read_bytes())}


@register()
def plotly_bundle_check(**kwargs: Any) -> list[CheckMessage]:
    if not PLOTLY_FILE.is_file():
        return [
            Error(
                f"{PLOTLY_STATIC_PATH} is missing: the dashboards draw their charts with it.",
                hint="It is part of the repository (dashboards/static); restore it.",
                id="dashboards.E001",
            )
        ]
    return []


class HashedStaticFilesStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's hashed, compressed storage, naming the hashed files under DEBUG too once
    ``collectstatic`` has run (``make run`` runs it), so the demo is as fast as production.
    Under DEBUG, a file added since falls back to its plain name (served from the apps'
    folders) instead of failing the page."""

    def url(self, name: str | None, force: bool = False) -> str:
        if not settings.DEBUG:
            return super().url(name, force)
        try:
            return super().url(name, force=True)
        except ValueError:  # not collected yet
            return super().url(name, force)
