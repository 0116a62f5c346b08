"""Help for the portal's users: the documentation site built from ``docs/`` (MkDocs, ``make
docs`` writes it to ``site/`` at the repository's root) served under ``/help/``, and help
pages written in Markdown under ``docs/`` and rendered into the portal's own layout (no raw
HTML from the files: CommonMark with tables, HTML escaped)."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.conf import settings
from markdown_it import MarkdownIt

# slug -> file under docs/: the pages /help/<slug>/ renders in the portal's layout.
HELP_PAGES = {"preemption": "use/preemption.md"}

# The built site, beside docs/ at the repository's root (this file is portal/help.py).
SITE_DIR = Path(__file__).resolve().parent.parent / "site"
BUILD_COMMAND = "make docs"

# The theme's own inline start-up scripts (a bare <script>, never one with attributes: those
# are JSON data or files). The page's Content-Security-Policy allows exactly these by hash.
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


@dataclass(frozen=True)
class HelpPage:
    title: str
    html: str


@cache
def help_page(slug: str) -> HelpPage:
    """The rendered page (read once per process); its title is the file's first heading."""
    text = (Path(settings.BASE_DIR) / "docs" / HELP_PAGES[slug]).read_text(encoding="utf-8")
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), slug)
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    return HelpPage(title, renderer.render(text))


def site_built(site_dir: Path | None = None) -> bool:
    return ((site_dir or SITE_DIR) / "index.html").is_file()


@dataclass(frozen=True)
class SiteFile:
    path: Path
    # The URL names a folder but lacks its final slash: the page's relative links need it.
    needs_slash: bool = False


def site_file(url: str, site_dir: Path | None = None) -> SiteFile | None:
    """The built file ``/help/<url>`` serves (a folder's ``index.html``), or None: not in the
    site, or outside it (``..``, a link pointing elsewhere)."""
    root = (site_dir or SITE_DIR).resolve()
    target = (root / url).resolve()
    if not target.is_relative_to(root):
        return None
    if target.is_dir():
        index = target / "index.html"
        if not index.is_file():
            return None
        return SiteFile(index, needs_slash=bool(url) and not url.endswith("/"))
    return SiteFile(target) if target.is_file() else None


def inline_script_hashes(html: bytes) -> list[str]:
    """CSP sources (``'sha256-…'``) of the page's inline scripts, in order, without repeats."""
    hashes = []
    for script in _INLINE_SCRIPT.findall(html):
        source = "'sha256-" + base64.b64encode(hashlib.sha256(script).digest()).decode() + "'"
        if source not in hashes:
            hashes.append(source)
    return hashes


def unbuilt_page() -> HelpPage:
    """What /help/ says while the site is not built."""
    return HelpPage(
        "The documentation is not built",
        "<h1>The documentation is not built</h1>"
        "<p>The documentation site is built from <code>docs/</code> in the repository. "
        f"Build it with <code>{BUILD_COMMAND}</code> in the portal's checkout (it writes "
        "<code>site/</code>, which this page then serves), or read the Markdown files under "
        "<code>docs/</code> directly.</p>",
    )
