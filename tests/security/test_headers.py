"""Production settings and the headers every response carries: check --deploy clean, HTTPS
only (redirect, HSTS, secure HttpOnly SameSite cookies) while the demo's settings keep
plain-HTTP ``make run`` working, and a Content-Security-Policy that allows no inline script."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client

from tests.portal.test_settings import PRODUCTION, manage

ROOT = Path(__file__).resolve().parents[2]
# What production sets (README, Configuration): the documented variables and nothing else.
DOCUMENTED_PRODUCTION = {**PRODUCTION, "CSRF_TRUSTED_ORIGINS": "https://portal.example.com"}

PROBE = """
import json
from django.conf import settings
from django.test import Client
c = Client()
plain = c.get("/api/v1/me/", HTTP_HOST="portal.example.com")
claimed = c.get("/api/v1/me/", HTTP_HOST="portal.example.com", HTTP_X_FORWARDED_PROTO="https")
tls = c.get("/api/v1/me/", HTTP_HOST="portal.example.com", secure=True)
print(json.dumps({
    "plain_status": plain.status_code,
    "plain_location": plain.headers.get("Location"),
    "claimed_status": claimed.status_code,
    "status": tls.status_code,
    "hsts": tls.headers.get("Strict-Transport-Security"),
    "csp": tls.headers.get("Content-Security-Policy"),
    "cookies": [
        [getattr(settings, f"{kind}_COOKIE_{flag}") for flag in ("SECURE", "HTTPONLY", "SAMESITE")]
        for kind in ("SESSION", "CSRF")
    ],
}))
"""


def probe(env: dict[str, str], tmp_path: Path) -> dict[str, object]:
    result = manage("shell", "-v", "0", "-c", PROBE, env=env, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_check_deploy_is_clean_with_the_documented_production_variables(tmp_path):
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=DOCUMENTED_PRODUCTION,
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_is_https_only_with_hsts_and_strict_cookies(tmp_path):
    seen = probe(DOCUMENTED_PRODUCTION, tmp_path)
    assert seen["plain_status"] == 301
    assert seen["plain_location"] == "https://portal.example.com/api/v1/me/"
    assert seen["status"] == 401
    assert seen["hsts"] == "max-age=31536000; includeSubDomains; preload"
    assert seen["cookies"] == [[True, True, "Lax"], [True, True, "Lax"]]
    assert "script-src 'self'" in str(seen["csp"])


def test_x_forwarded_proto_is_trusted_only_behind_a_configured_proxy(tmp_path):
    """A direct client's "X-Forwarded-Proto: https" over plain HTTP is not HTTPS: it is
    redirected like any plain request. With TRUSTED_PROXY_COUNT set, the proxy's header is."""
    direct = probe(DOCUMENTED_PRODUCTION, tmp_path)
    assert direct["claimed_status"] == 301
    proxied = probe({**DOCUMENTED_PRODUCTION, "TRUSTED_PROXY_COUNT": "1"}, tmp_path)
    assert proxied["claimed_status"] == 401  # served as HTTPS: the proxy said so
    assert proxied["plain_status"] == 301


def test_the_demo_settings_keep_plain_http_working_for_make_run(tmp_path):
    demo = {"DJANGO_SETTINGS_MODULE": "portal.settings.demo", "ALLOWED_HOSTS": "portal.example.com"}
    seen = probe(demo, tmp_path)
    assert seen["plain_status"] == 401  # served over plain HTTP, no redirect
    assert seen["hsts"] is None
    assert seen["cookies"] == [[False, True, "Lax"], [False, True, "Lax"]]


def test_the_session_cookie_is_httponly_and_samesite(world, settings):
    settings.SESSION_COOKIE_SECURE = True
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})
    assert response.status_code == 302
    cookie = response.cookies["sessionid"]
    assert (cookie["secure"], cookie["httponly"], cookie["samesite"]) == (True, True, "Lax")


def csp_of(response) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    header = response.headers["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.mark.parametrize(
    "path", ["/login/", "/", "/console/", "/fleet/", "/api/v1/me/", "/api/v1/docs/", "/admin/"]
)
def test_every_response_carries_a_csp_without_inline_script(world, path):
    client = Client()
    client.force_login(world.admin)
    response = client.get(path)
    assert response.status_code == 200, path
    policy = csp_of(response)
    assert policy["script-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"]
    assert policy["form-action"] == ["'self'"]
    assert "'unsafe-inline'" not in policy.get("default-src", [])
    assert "'unsafe-eval'" not in policy["script-src"]


def test_the_api_docs_load_their_start_up_script_from_a_file(world):
    client = Client()
    client.force_login(world.admin)
    page = client.get("/api/v1/docs/").content.decode()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S)
    assert scripts
    assert all('src="' in attrs and not body.strip() for attrs, body in scripts), scripts
    script_url = re.findall(r'<script src="([^"]*script=[^"]*)"', page)[0]
    script = client.get(script_url.replace("&amp;", "&"))
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
EVENT_HANDLER = re.compile(r"<[^>]*\son[a-z]+\s*=", re.I)
JS_URL = re.compile(r"""(href|src|action)\s*=\s*["']\s*javascript:""", re.I)


def test_no_template_has_an_inline_script_or_event_handler():
    templates = sorted((ROOT / "templates").rglob("*.html")) + sorted(
        ROOT.glob("*/templates/**/*.html")
    )
    assert len(templates) > 10
    for template in templates:
        text = template.read_text()
        where = str(template.relative_to(ROOT))
        assert not INLINE_SCRIPT.search(text), f"inline <script> in {where}"
        assert not EVENT_HANDLER.search(text), f"on*= handler in {where}"
        assert not JS_URL.search(text), f"javascript: URL in {where}"


def test_page_scripts_neither_eval_nor_write_handlers():
    scripts = sorted((ROOT / "portal" / "static" / "portal").glob("*.js"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        where = str(script.relative_to(ROOT))
        assert not re.search(r"\beval\s*\(|new\s+Function\s*\(", text), where
        assert not re.search(r"setAttribute\(\s*['\"]on", text), where
        assert not re.search(r"\.innerHTML\s*=.*<script", text), where
