"""Objects in memory, one global resourceVersion counter, optionally saved to a JSON file."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger("devcluster")

Key = tuple[str, str]  # (namespace or "", name)
Listener = Callable[[str, str, dict[str, Any]], None]  # (type key, ADDED|MODIFIED|DELETED, obj)


class Store:
    def __init__(self, state_file: Path | None = None) -> None:
        self.state_file = state_file
        self.resource_version = 0
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self.listeners: list[Listener] = []
        self.dirty = False

    # Reads ---------------------------------------------------------------------------------

    def get(self, type_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(type_key, {}).get((namespace, name))

    def list(self, type_key: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of one type, sorted by (namespace, name); ``namespace=None`` means all."""
        objects = self._objects.get(type_key, {})
        return [objects[key] for key in sorted(objects) if namespace is None or key[0] == namespace]

    def type_keys(self) -> Iterator[str]:
        return iter(list(self._objects))

    # Writes --------------------------------------------------------------------------------

    def next_resource_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def put(self, type_key: str, obj: dict[str, Any], *, created: bool) -> None:
        """Store ``obj`` (whose resourceVersion the caller has just set)."""
        metadata = obj["metadata"]
        self._objects.setdefault(type_key, {})[
            (metadata.get("namespace", ""), metadata["name"])
        ] = obj
        self._changed(type_key, "ADDED" if created else "MODIFIED", obj)

    def delete(self, type_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._objects.get(type_key, {}).pop((namespace, name), None)
        if obj is not None:
            # A deletion is a change too: watchers see the deleted object at a new version.
            obj = {
                **obj,
                "metadata": {**obj["metadata"], "resourceVersion": self.next_resource_version()},
            }
            self._changed(type_key, "DELETED", obj)
        return obj

    def wipe(self) -> None:
        self._objects.clear()
        self.dirty = True

    def _changed(self, type_key: str, event: str, obj: dict[str, Any]) -> None:
        self.dirty = True
        for listener in list(self.listeners):
            listener(type_key, event, obj)

    # Persistence ---------------------------------------------------------------------------

    def load(self, known_type_keys: set[str]) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        data = json.loads(self.state_file.read_text(encoding="utf-8"))
        self.resource_version = int(data.get("resourceVersion", 0))
        for type_key, objects in (data.get("objects") or {}).items():
            if type_key not in known_type_keys:
                logger.warning("devcluster: dropping saved %s: no longer served", type_key)
                continue
            for obj in objects:
                metadata = obj["metadata"]
                self._objects.setdefault(type_key, {})[
                    (metadata.get("namespace", ""), metadata["name"])
                ] = obj
        self.dirty = False

    def save(self) -> None:
        if self.state_file is None or not self.dirty:
            return
        data = {
            "resourceVersion": self.resource_version,
            "objects": {
                type_key: [objects[key] for key in sorted(objects)]
                for type_key, objects in sorted(self._objects.items())
                if objects
            },
        }
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temporary, self.state_file)
        self.dirty = False
