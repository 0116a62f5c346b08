"""The documentation site under /help/: its built files as they are, each page with a
Content-Security-Policy that allows exactly the theme's inline scripts; how to build it while
it is not built; nothing outside the site; signed-in people only. /help/preemption/ stays the
portal's own page (tests/portal/test_priority_pages.py)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from portal import help as docs_site
from tests.pages import logged_in

pytestmark = pytest.mark.django_db

SCRIPT = b'var palette = __md_get("__palette");'


def sha256_source(script: bytes) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script).digest()).decode() + "'"


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    (root / "use" / "demo").mkdir(parents=True)
    (root / "assets").mkdir()
    (root / "index.html").write_bytes(
        b"<html><head><script>" + SCRIPT + b"</script>"
        b'<script id="__config" type="application/json">{"base": "."}</script>'
        b'<script src="assets/bundle.js"></script></head><body>Home</body></html>'
    )
    (root / "use" / "demo" / "index.html").write_bytes(b"<html><body>A tour</body></html>")
    (root / "assets" / "bundle.js").write_bytes(b"console.log(1)")
    (root / "assets" / "style.css").write_bytes(b"body {}")
    (tmp_path / "secret.txt").write_text("not part of the site")
    monkeypatch.setattr(docs_site, "SITE_DIR", root)
    return root


def test_the_site_index_with_its_inline_scripts_allowed_by_hash(world, site):
    page = logged_in(world.carol).get("/help/")
    assert page.status_code == 200
    assert b"Home" in page.content
    policy = page["Content-Security-Policy"]
    script_src = next(d for d in policy.split("; ") if d.startswith("script-src "))
    # Exactly the page's bare inline script by hash, beside the portal's own origin: no
    # 'unsafe-inline', and the JSON data block is not a script to allow.
    assert script_src == f"script-src 'self' {sha256_source(SCRIPT)}"
    assert "frame-ancestors 'none'" in policy


def test_pages_assets_and_folder_urls(world, site):
    client = logged_in(world.alice)
    assert b"A tour" in client.get("/help/use/demo/").content
    moved = client.get("/help/use/demo")
    assert moved.status_code == 302 and moved["Location"] == "/help/use/demo/"
    script = client.get("/help/assets/bundle.js")
    assert script.status_code == 200
    assert "javascript" in script["Content-Type"]
    assert b"".join(script.streaming_content) == b"console.log(1)"
    assert client.get("/help/assets/style.css")["Content-Type"].startswith("text/css")


def test_nothing_outside_the_site(world, site):
    client = logged_in(world.alice)
    for url in ("/help/no-such-page/", "/help/../secret.txt", "/help/%2e%2e/secret.txt"):
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"not part of the site" not in response.content
    assert docs_site.site_file("../secret.txt") is None
    assert docs_site.site_file("assets") is None  # a folder without a page


def test_signed_in_people_only(world, site):
    anonymous = logged_in(None).get("/help/use/demo/")
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]


def test_says_how_to_build_it_while_it_is_not_built(world, tmp_path, monkeypatch):
    monkeypatch.setattr(docs_site, "SITE_DIR", tmp_path / "site")
    client = logged_in(world.carol)
    for url in ("/help/", "/help/use/demo/"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert b"The documentation is not built" in page.content
        assert b"make docs" in page.content


def test_the_preemption_page_stays_the_portals(world, site):
    page = logged_in(world.carol).get("/help/preemption/")
    assert page.status_code == 200
    assert b"<h1>Preemption and checkpoints</h1>" in page.content


@pytest.mark.skipif(not docs_site.site_built(), reason="the site is not built (make docs)")
def test_the_built_site_allows_every_inline_script_it_has(world):
    client = logged_in(world.carol)
    for url in ("/help/", "/help/use/demo/", "/help/develop/requirements/"):
        page = client.get(url)
        assert page.status_code == 200, url
        for source in docs_site.inline_script_hashes(page.content):
            assert source in page["Content-Security-Policy"], url
