"""plotly.js from the installed ``plotly`` package, as the static file
``dashboards/plotly.min.js``: served by WhiteNoise and collected by ``collectstatic`` like the
app's own files, never copied into the repository and never fetched from a CDN. Only that one
file of the package is exposed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage, Error
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "dashboards/plotly.min.js"


def plotly_package_dir() -> Path | None:
    try:
        import plotly
    except ImportError:  # a partial install: the check below says so
        return None
    return Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    """Finds ``dashboards/plotly.min.js`` in the plotly package's ``package_data``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        folder = plotly_package_dir()
        self.storage = FileSystemStorage(location=str(folder)) if folder else None
        if self.storage is not None:
            self.storage.prefix = "dashboards"  # type: ignore[attr-defined]  # staticfiles' convention

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        folder = plotly_package_dir()
        if folder is None or not (folder / "plotly.min.js").is_file():
            return [
                Error(
                    "plotly.min.js is missing: the dashboards need the plotly package.",
                    hint="pip install plotly (it is in requirements.lock)",
                    id="dashboards.E001",
                )
            ]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        # Nothing found is [] either way (Django's finders do the same; None would be listed).
        if path != PLOTLY_STATIC_PATH or self.storage is None:
            return []
        match = self.storage.path("plotly.min.js")
        if not Path(match).is_file():
            return []
        return [match] if find_all else match

    def list(self, ignore_patterns: Any) -> Any:
        if self.storage is not None and self.storage.exists("plotly.min.js"):
            yield "plotly.min.js", self.storage
