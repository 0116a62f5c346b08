"""What the documentation quotes exists: every repository path (``quotas/services/rules.py``),
``make`` target and portal URL path (``/requests/``) in README.md, CHANGELOG.md, bench/README.md
and docs/, and the configuration page names every variable the settings read. The site itself
is built with ``mkdocs build --strict`` by ``make docs`` (CI), which checks its links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md"]
    + [p for p in (ROOT / "docs").rglob("*.md") if not p.is_symlink()]
)
# Inline code, and fenced blocks (shell examples name make targets and paths too).
CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} | {".ci"}
# What commands write (ignored by git): quoted as where to look, not in a checkout.
BUILT = ("bench/results/", "site/")
# A placeholder in a quoted path or URL: <slug>, {uuid}, NNNN, *.
PLACEHOLDER = re.compile(r"<[^>]*>|\{[^}]*\}|\bNNNN\b|\*")
# Paths on a node, a container or a workstation, not in this repository.
NOT_OURS = (
    "/var/",
    "/proc/",
    "/usr/",
    "/etc/",
    "/tmp/",  # noqa: S108  # quoted in the docs, never opened
    "/dev/",
    "/opt/",
    "/data",
    "/kubeconfigs",
)
# URL paths that are not the portal's: Prometheus' HTTP API, OpenID discovery, the Kubernetes API.
FOREIGN_URLS = ("/api/v1/query_range", "/.well-known/", "/version", "/apis/", "/api/v1/namespaces/")


def quoted(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    spans = CODE.findall(FENCE.sub("", text))
    for block in FENCE.findall(text):
        spans.extend(block.splitlines())
    return [s.strip() for s in spans]


def repository_paths(span: str) -> list[str]:
    """The repository paths in a quoted span: a/b with a first part at the repository's root.
    An API route (``POST usage/samples/``, relative to ``/api/v1/``) is not a path."""
    if re.match(r"(GET|POST|PUT|PATCH|DELETE)\b", span):
        return []
    found = []
    for word in re.split(r"[\s,;()=]+", span):
        word = word.strip("'\"").rstrip(".:")
        if "/" not in word or word.startswith(("/", "http", "./")) or "://" in word:
            continue
        if PLACEHOLDER.search(word) or "$" in word or "…" in word or "..." in word:
            continue
        if word.split("/", 1)[0] in TOP_LEVEL and not word.startswith(BUILT):
            found.append(word.split("#", 1)[0])
    return found


def url_paths(span: str) -> list[str]:
    """Portal URL paths: a quoted span that is one path from the root (``/tenants/team-a/``,
    ``GET /api/v1/me/``), without its query string."""
    match = re.fullmatch(
        r"(?:(?:GET|POST|PUT|PATCH|DELETE)(?:/\w+)* )?(/[\w./{}<>*-]*)(\?\S*)?", span
    )
    if not match:
        return []
    path = match[1]
    if path.startswith(NOT_OURS) or path.startswith(FOREIGN_URLS) or path in ("/", "/api/v1/"):
        return []
    if not (path.endswith("/") or path in ("/metrics", "/healthz", "/livez", "/readyz")):
        return []  # a file on disk (`/usr/bin/chromium`), not a page
    return [PLACEHOLDER.sub("1", path)]


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w.-]+):", makefile, re.MULTILINE))


CASES = [(doc, span) for doc in DOCS for span in quoted(doc)]


def test_the_docs_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "CHANGELOG.md", "docs/index.md", "docs/operate/configuration.md"} <= names
    assert len(CASES) > 1000


def test_every_quoted_repository_path_exists():
    missing = sorted(
        {
            f"{doc.relative_to(ROOT)}: {path}"
            for doc, span in CASES
            for path in repository_paths(span)
            if not (ROOT / path).exists()
        }
    )
    assert missing == []


def test_every_quoted_make_target_exists():
    targets = make_targets()
    quoted_targets = {
        (f"{doc.relative_to(ROOT)}: {span}", target)
        for doc, span in CASES
        for target in re.findall(r"(?:^|[;&|(]\s*)make ([a-z][\w-]*)", span)
    }
    assert {"run", "test", "docs"} <= {target for _, target in quoted_targets}
    assert sorted(where for where, target in quoted_targets if target not in targets) == []


def test_every_quoted_url_path_resolves():
    missing = []
    for doc, span in CASES:
        for path in url_paths(span):
            try:
                resolve(path)
            except Resolver404:
                missing.append(f"{doc.relative_to(ROOT)}: {span}")
    assert sorted(set(missing)) == []


def settings_variables() -> set[str]:
    sources = [ROOT / "portal" / "settings.py", *(ROOT / "portal" / "settings").glob("*.py")]
    read = re.compile(
        r"""(?:env_\w+|getenv|environ\.get|environ\[)\(?\s*["']([A-Z][A-Z0-9_]+)["']"""
    )
    return {
        name for source in sources if source.exists() for name in read.findall(source.read_text())
    }


@pytest.mark.parametrize("name", sorted(settings_variables() - {"TESTING"}))
def test_the_configuration_page_names_every_variable_the_settings_read(name):
    page = (ROOT / "docs" / "operate" / "configuration.md").read_text(encoding="utf-8")
    assert f"`{name}`" in page, f"{name} is read by the settings: add it to the table"


def test_the_docs_link_nothing_outside_the_repository():
    outside = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            resolved = (doc.parent / target.split("#", 1)[0]).resolve()
            if "://" in target or not resolved.is_relative_to(ROOT) or not resolved.exists():
                outside.append(f"{doc.relative_to(ROOT)}: {target}")
        if "../shared" in text:
            outside.append(f"{doc.relative_to(ROOT)}: ../shared")
    assert outside == []


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_bytes()) <= 15 * 1024
