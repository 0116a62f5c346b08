"""The OpenAPI document describes every endpoint without warnings; the docs work offline."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, URLResolver
from drf_spectacular.generators import SchemaGenerator

from core.api.schema import schema_cache_clear
from portal.api import urls as api_urls

NOT_IN_THE_DOCUMENT = {"schema/", "docs/"}  # the document and its viewer


def api_paths() -> set[str]:
    """Every route in portal/api/urls.py as an OpenAPI path template."""
    paths = set()

    def walk(patterns: list, prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and "(?P<format>" not in route:
                if str(entry.pattern) in NOT_IN_THE_DOCUMENT:
                    continue
                template = re.sub(r"\(\?P<(\w+)>(?:\[[^\]]*\]|[^)])*\)", r"{\1}", route)
                template = template.replace("{pk}", "{id}")  # the document names the field
                template = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", template)
                paths.add("/api/v1/" + template.replace("^", "").replace("$", ""))

    walk(api_urls.urlpatterns, "")
    return paths


def test_the_document_generates_and_validates_without_warnings(tmp_path: Path):
    target = tmp_path / "openapi.yml"
    call_command("spectacular", validate=True, fail_on_warn=True, file=str(target))
    document = yaml.safe_load(target.read_text())
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "GPU quota portal API"


def test_every_api_route_is_in_the_document():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    routes = api_paths()
    assert "/api/v1/tenants/{tenant_slug}/quotas/" in routes
    assert len(routes) >= 14
    assert routes == set(schema["paths"])


def test_every_operation_is_documented_with_its_methods():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    paths = schema["paths"]
    assert set(paths["/api/v1/tenants/"]) == {"get", "post"}
    assert set(paths["/api/v1/tenants/{slug}/"]) == {"get", "patch"}
    assert set(paths["/api/v1/tenants/{tenant_slug}/members/{username}/"]) == {
        "get",
        "patch",
        "delete",
    }
    assert set(paths["/api/v1/auth/token/"]) == {"post"}
    assert paths["/api/v1/auth/token/"]["post"].get("security", []) in ([], [{}])  # anonymous
    assert {"tokenAuth": []} in paths["/api/v1/me/"]["get"]["security"]
    assert "tokenAuth" in schema["components"]["securitySchemes"]
    create = paths["/api/v1/tenants/"]["post"]["requestBody"]["content"]["application/json"]
    create_schema = schema["components"]["schemas"][create["schema"]["$ref"].rsplit("/", 1)[1]]
    assert {"slug", "display_name", "tier", "cluster"} <= set(create_schema["required"])


def test_schema_and_docs_answer_for_a_signed_in_user(world):
    client = Client()
    client.force_login(world.carol)
    schema = client.get("/api/v1/schema/")
    assert schema.status_code == 200
    assert "/api/v1/tenants/{tenant_slug}/quotas/" in yaml.safe_load(schema.content)["paths"]
    as_json = client.get("/api/v1/schema/?format=json")
    assert as_json.status_code == 200
    assert as_json.json()["info"]["title"] == "GPU quota portal API"
    assert client.get("/api/v1/docs/").status_code == 200


def test_the_served_document_is_generated_once_and_stays_the_same(world, monkeypatch):
    """Anyone may read it and generating it costs about half a second of CPU: the first call
    of each process builds it, the next ones serve it as it was, in YAML and JSON alike."""
    calls = []
    generate = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    schema_cache_clear()
    client = Client()  # anonymous
    first = client.get("/api/v1/schema/")
    assert first.status_code == 200 and len(calls) == 1
    first_json = client.get("/api/v1/schema/?format=json")
    for _ in range(3):
        again = client.get("/api/v1/schema/")
        assert again.status_code == 200
        assert again.content == first.content
        assert again["Content-Type"] == first["Content-Type"]
        assert again["Content-Disposition"] == first["Content-Disposition"]
        assert client.get("/api/v1/schema/?format=json").content == first_json.content
    assert len(calls) == 1
    fresh = SchemaGenerator().get_schema(request=None, public=True)
    assert yaml.safe_load(first.content) == fresh == first_json.json()


class _Assets(HTMLParser):
    """Collects the URLs a page loads: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


@pytest.mark.parametrize("page", ["/api/v1/docs/", "/", "/tenants/team-a/", "/console/"])
def test_docs_and_pages_load_only_local_static_files(world, page):
    client = Client()
    client.force_login(world.admin)
    response = client.get(page)
    assert response.status_code == 200
    html = response.content.decode()
    parser = _Assets()
    parser.feed(html)
    assert parser.urls, "the docs page loads no assets?"
    for url in parser.urls:
        assert not re.match(r"^(https?:)?//", url), f"{page} loads {url} from another host"
        # The docs page's start-up script is served by the page itself (no inline script: CSP)
        assert url.startswith(("/static/", f"{page}?script=")), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert b"".join(asset.streaming_content if asset.streaming else [asset.content])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
