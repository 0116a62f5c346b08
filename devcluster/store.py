"""Objects in memory, one global resourceVersion counter, optionally saved to a JSON file.

Objects are indexed by type, then namespace, then name, so that a namespaced GET or LIST, and
the quota admission that lists one namespace's quotas and objects on every write, touch only
that namespace's objects rather than every object of the type. A list's order, (namespace,
name), is kept sorted per type and per namespace and sorted again only after an object is
added or removed (not when one changes), so a LIST right after a write costs no sort of every
key either.

Stored objects are never changed in place: every write stores a new dict. So each object's
JSON can be kept (``encoded``) and a LIST answer joined from those bytes, and ``changes``
(bumped by every add, change and removal) tells a reader whether what it computed from the
store still holds."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

logger = logging.getLogger("devcluster")

Key = tuple[str, str]  # (namespace or "", name)
Listener = Callable[[str, str, dict[str, Any]], None]  # (type key, ADDED|MODIFIED|DELETED, obj)


class _TypeIndex:
    """The objects of one type: by namespace ("" for cluster-scoped) then name, and the sorted
    keys computed when asked after an add or a removal."""

    __slots__ = ("_namespace_names", "_sorted", "by_namespace")

    def __init__(self) -> None:
        self.by_namespace: dict[str, dict[str, dict[str, Any]]] = {}
        self._sorted: list[Key] | None = []
        self._namespace_names: dict[str, list[str]] = {}

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        objects = self.by_namespace.get(namespace)
        return None if objects is None else objects.get(name)

    def put(self, namespace: str, name: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Store ``obj``; the object it replaces, if any."""
        objects = self.by_namespace.setdefault(namespace, {})
        replaced = objects.get(name)
        if replaced is None:
            self._sorted = None
            self._namespace_names.pop(namespace, None)
        objects[name] = obj
        return replaced

    def pop(self, namespace: str, name: str) -> dict[str, Any] | None:
        objects = self.by_namespace.get(namespace)
        if objects is None or name not in objects:
            return None
        obj = objects.pop(name)
        if not objects:
            del self.by_namespace[namespace]
        self._sorted = None
        self._namespace_names.pop(namespace, None)
        return obj

    def __len__(self) -> int:
        return sum(len(objects) for objects in self.by_namespace.values())

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        objects = self.by_namespace.get(namespace)
        if not objects:
            return []
        names = self._namespace_names.get(namespace)
        if names is None:
            names = self._namespace_names[namespace] = sorted(objects)
        return [objects[name] for name in names]

    def everything(self) -> list[dict[str, Any]]:
        if self._sorted is None:
            self._sorted = sorted(
                (namespace, name)
                for namespace, objects in self.by_namespace.items()
                for name in objects
            )
        by_namespace = self.by_namespace
        return [by_namespace[namespace][name] for namespace, name in self._sorted]


class Store:
    def __init__(self, state_file: Path | None = None) -> None:
        self.state_file = state_file
        self.resource_version = 0
        self._types: dict[str, _TypeIndex] = {}
        self.listeners: list[Listener] = []
        self.dirty = False
        self.changes = 0  # every add, change and removal (and a wipe) counts one
        # id(stored object) -> (the object, its compact JSON): the object is held so that its
        # id cannot be taken by another while the entry lives; replaced objects are dropped.
        self._encoded: dict[int, tuple[dict[str, Any], bytes]] = {}

    # Reads ---------------------------------------------------------------------------------

    def get(self, type_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        index = self._types.get(type_key)
        return None if index is None else index.get(namespace, name)

    def list(self, type_key: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of one type, sorted by (namespace, name); ``namespace=None`` means all."""
        index = self._types.get(type_key)
        if index is None:
            return []
        return index.everything() if namespace is None else index.in_namespace(namespace)

    def count(self, type_key: str, namespace: str | None = None) -> int:
        """How many objects of one type (in one namespace), without listing them."""
        index = self._types.get(type_key)
        if index is None:
            return 0
        if namespace is None:
            return len(index)
        return len(index.by_namespace.get(namespace) or ())

    def encoded(self, obj: dict[str, Any]) -> bytes:
        """The compact JSON (``separators=(",", ":")``) of a stored object, made once."""
        entry = self._encoded.get(id(obj))
        if entry is not None and entry[0] is obj:
            return entry[1]
        data = json.dumps(obj, separators=(",", ":")).encode()
        self._encoded[id(obj)] = (obj, data)
        return data

    def type_keys(self) -> Iterator[str]:
        return iter(list(self._types))

    # Writes --------------------------------------------------------------------------------

    def next_resource_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def put(self, type_key: str, obj: dict[str, Any], *, created: bool) -> None:
        """Store ``obj`` (whose resourceVersion the caller has just set)."""
        self._insert(type_key, obj)
        self._changed(type_key, "ADDED" if created else "MODIFIED", obj)

    def delete(self, type_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        index = self._types.get(type_key)
        obj = None if index is None else index.pop(namespace, name)
        if obj is not None:
            self.changes += 1
            self._encoded.pop(id(obj), None)
            # A deletion is a change too: watchers see the deleted object at a new version.
            obj = {
                **obj,
                "metadata": {**obj["metadata"], "resourceVersion": self.next_resource_version()},
            }
            self._changed(type_key, "DELETED", obj)
        return obj

    def wipe(self) -> None:
        self._types.clear()
        self._encoded.clear()
        self.changes += 1
        self.dirty = True

    def _insert(self, type_key: str, obj: dict[str, Any]) -> None:
        index = self._types.get(type_key)
        if index is None:
            index = self._types[type_key] = _TypeIndex()
        metadata = obj["metadata"]
        replaced = index.put(metadata.get("namespace", ""), metadata["name"], obj)
        if replaced is not None:
            self._encoded.pop(id(replaced), None)
        self.changes += 1

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
                self._insert(type_key, obj)
        self.dirty = False

    def save(self) -> None:
        if self.state_file is None or not self.dirty:
            return
        data = {
            "resourceVersion": self.resource_version,
            "objects": {
                type_key: index.everything()
                for type_key, index in sorted(self._types.items())
                if len(index)
            },
        }
        temporary = self.state_file.with_suffix(".tmp")
        # orjson: json.dumps with an indent runs Python's own encoder, and a save shortly after
        # every burst of writes was two thirds of the stand-in's CPU in the load test.
        temporary.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        os.replace(temporary, self.state_file)
        self.dirty = False
