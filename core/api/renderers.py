"""Renderers beside JSON: YAML text for the manifests the portal owns."""

from __future__ import annotations

from typing import Any

from rest_framework.renderers import BaseRenderer


class YamlTextRenderer(BaseRenderer):
    """Passes a YAML string through (the view renders it); errors still come as JSON text."""

    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if isinstance(data, str):
            return data.encode(self.charset)
        import json

        return json.dumps(data).encode(self.charset)
