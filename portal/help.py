"""Help pages written in Markdown under ``docs/`` and rendered for the portal (no raw HTML
from the files: CommonMark with tables, HTML escaped)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.conf import settings
from markdown_it import MarkdownIt

# slug -> file under docs/: the pages /help/<slug>/ serves.
HELP_PAGES = {"preemption": "preemption.md"}


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
