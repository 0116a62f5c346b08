"""Events: the core/v1 and events.k8s.io/v1 APIs over the same events (an Event written through
one is served by the other, converted field by field as the API server does), and a recorder
for what the stand-in does as a controller would (written as core/v1 Events, as client-go's
legacy recorder that the controllers use does)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from devcluster.store import Store

CORE = "events"
GROUPED = "events.events.k8s.io"

# core/v1 field -> events.k8s.io/v1 field, for the fields that are only renamed.
_RENAMED = {
    "involvedObject": "regarding",
    "message": "note",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
    "source": "deprecatedSource",
    "reportingComponent": "reportingController",
}
_SAME = ("metadata", "reason", "type", "action", "related", "eventTime", "reportingInstance")


def to_grouped(event: dict[str, Any]) -> dict[str, Any]:
    """A core/v1 Event as events.k8s.io/v1 shows it."""
    converted: dict[str, Any] = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for key in _SAME:
        if key in event:
            converted[key] = dict(event[key]) if key == "metadata" else event[key]
    for old, new in _RENAMED.items():
        if event.get(old) not in (None, "", {}):
            converted[new] = event[old]
    series = event.get("series")
    if isinstance(series, dict):
        converted["series"] = {
            "count": series.get("count"),
            "lastObservedTime": series.get("lastObservedTime"),
        }
    return converted


def to_core(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as core/v1 shows it."""
    converted: dict[str, Any] = {"apiVersion": "v1", "kind": "Event"}
    for key in _SAME:
        if key in event:
            converted[key] = dict(event[key]) if key == "metadata" else event[key]
    for old, new in _RENAMED.items():
        if event.get(new) not in (None, "", {}):
            converted[old] = event[new]
    converted.setdefault("involvedObject", {})
    series = event.get("series")
    if isinstance(series, dict):
        converted["series"] = dict(series)
    return converted


class Events:
    """Keeps the two Event APIs in step and records the stand-in's own events."""

    def __init__(self, store: Store, now: Callable[[], float] = time.time) -> None:
        self.store = store
        self.now = now
        self._mirroring = False
        store.listeners.append(self._changed)

    def _changed(self, type_key: str, event: str, obj: dict[str, Any]) -> None:
        if self._mirroring or type_key not in (CORE, GROUPED):
            return
        other = GROUPED if type_key == CORE else CORE
        metadata = obj["metadata"]
        self._mirroring = True
        try:
            if event == "DELETED":
                self.store.delete(other, metadata.get("namespace", ""), metadata["name"])
            else:
                converted = to_grouped(obj) if type_key == CORE else to_core(obj)
                self.store.put(other, converted, created=event == "ADDED")
        finally:
            self._mirroring = False

    def record(
        self,
        involved: dict[str, Any],
        event_type: str,
        reason: str,
        message: str,
        *,
        component: str,
    ) -> dict[str, Any]:
        """A core/v1 Event about ``involved`` (a stored object), as client-go's recorder
        writes it: in the object's namespace (``default`` for cluster-scoped objects), named
        after the object and the time."""
        metadata = involved.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        now = self.now()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        involved_reference: dict[str, Any] = {
            "kind": involved.get("kind", ""),
            "namespace": metadata.get("namespace", ""),
            "name": metadata.get("name", ""),
            "uid": metadata.get("uid", ""),
            "apiVersion": involved.get("apiVersion", ""),
            "resourceVersion": metadata.get("resourceVersion", ""),
        }
        if not involved_reference["namespace"]:
            del involved_reference["namespace"]
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name', '')}.{int(now * 1e9):x}",
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": stamp,
            },
            "involvedObject": involved_reference,
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": event_type,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": "",
        }
        event["metadata"]["resourceVersion"] = self.store.next_resource_version()
        self.store.put(CORE, event, created=True)
        return event
