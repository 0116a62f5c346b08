"""The OpenAPI document states the error answers every operation can give, in the one shape
``core/api/errors.py`` writes (``{"detail", "code", "fields"}``), so that clients (and the
fuzzing in ``tests/fuzz/``) can rely on the document for every status, not only success."""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

ERROR_COMPONENT = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every API error: a message, a machine-readable code and, for bad input, "
    "the fields at fault (list positions as items[0].limit).",
    "properties": {
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "fields": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        "extra": {"type": "object", "additionalProperties": {}},
    },
    "required": ["detail", "code", "fields"],
}

WHY = {
    "400": "Bad input: `fields` names each field at fault and why; nothing changed.",
    "401": "No credentials, or a token that is unknown, revoked or expired.",
    "403": "Authenticated, but not allowed to do this.",
    "404": "No such object, or one of another tenant (the same answer on purpose).",
    "409": "The state changed meanwhile (a rule broken now, a request already decided).",
    "413": "The body is larger than this endpoint accepts; nothing stored.",
    "415": "The body is not JSON.",
    "429": "Too many requests; retry after the Retry-After header's seconds.",
}
WRITES = {"post", "put", "patch", "delete"}
BODIES = {"post", "put", "patch"}


def _statuses(method: str, operation: dict[str, Any], path_params: bool) -> list[str]:
    params = operation.get("parameters", [])
    statuses = ["401", "403", "429"]
    if method in BODIES or params:
        statuses.append("400")
    # A path parameter naming no visible object, or a page past the end of a list.
    if path_params or any(p.get("in") == "path" or p.get("name") == "page" for p in params):
        statuses.append("404")
    if method in WRITES:
        statuses.append("409")
    if method in BODIES:
        statuses += ["413", "415"]
    return statuses


def add_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: documents the error answers (see ``WHY``) on
    every operation that does not document them itself."""
    result.setdefault("components", {}).setdefault("schemas", {})[ERROR_COMPONENT] = ERROR_SCHEMA
    ref = {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for status in _statuses(method, operation, "{" in path):
                responses.setdefault(
                    status,
                    {"content": {"application/json": {"schema": ref}}, "description": WHY[status]},
                )
    return result


# The served document, per process: generating it walks every view and serializer (about half
# a second of CPU) and anyone may ask for it, so it is built once per version and language and
# each format rendered once. The code cannot change under a running process; a setting can
# (in tests), which empties the cache.
_SCHEMAS: dict[tuple[Any, ...], dict[str, Any]] = {}
_RENDERED: dict[tuple[Any, ...], tuple[bytes, str]] = {}


def schema_cache_clear(**_: Any) -> None:
    _SCHEMAS.clear()
    _RENDERED.clear()


setting_changed.connect(schema_cache_clear, dispatch_uid="core.api.schema.schema_cache_clear")


class CachedSchemaView(SpectacularAPIView):
    """drf-spectacular's document view, generating and rendering the document once per
    process (see ``_SCHEMAS``); the answer is the same, byte for byte."""

    _key: tuple[Any, ...] | None = None

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        self._key = (version, translation.get_language(), self.serve_public, self.urlconf)
        schema = _SCHEMAS.get(self._key)
        if schema is None:
            generator = self.generator_class(
                urlconf=self.urlconf, api_version=version, patterns=self.patterns
            )
            schema = _SCHEMAS.setdefault(
                self._key, generator.get_schema(request=request, public=self.serve_public)
            )
        filename = self._get_filename(request, version)
        return Response(
            data=schema, headers={"Content-Disposition": f'inline; filename="{filename}"'}
        )

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        if self._key is None or response.status_code != 200:
            return response
        key = (*self._key, response.accepted_media_type)
        rendered = _RENDERED.get(key)
        if rendered is None:
            response.render()
            _RENDERED[key] = (response.content, response["Content-Type"])
        else:
            response.content, response["Content-Type"] = rendered  # marks it rendered
        return response
