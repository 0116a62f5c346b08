"""``meta.k8s.io/v1`` Table answers, so ``kubectl get`` prints the columns a real server gives
(the CRDs' additionalPrinterColumns)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from devcluster.resources import PrinterColumn, ResourceType

_FILTER = re.compile(r"""\[\?\(@\.(\w+)\s*==\s*["']([^"']*)["']\)\]""")


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def human_age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<invalid>"
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    return f"{days}d" if days < 365 * 2 else f"{days // 365}y"


def _evaluate(obj: Any, json_path: str) -> Any:
    """The simple JSONPath forms CRDs use: ``.a.b`` and ``.a[?(@.k=="v")].b``."""
    value: Any = obj
    for token in re.findall(r"\.[^.\[]+|\[\?\([^)]*\)\]", json_path):
        if token.startswith("."):
            if not isinstance(value, dict):
                return None
            value = value.get(token[1:])
        else:
            match = _FILTER.fullmatch(token)
            if not match or not isinstance(value, list):
                return None
            key, expected = match.groups()
            found = [item for item in value if isinstance(item, dict) and item.get(key) == expected]
            value = found[0] if found else None
        if value is None:
            return None
    return value


def _cell(column: PrinterColumn, obj: dict[str, Any], now: datetime) -> Any:
    value = _evaluate(obj, column.json_path)
    if value is None:
        return None
    if column.type == "date":
        return human_age(str(value), now)
    if isinstance(value, dict | list):
        return str(value)
    return value


def _quota_columns(obj: dict[str, Any]) -> list[str]:
    """ResourceQuota's Request and Limit cells as upstream's printer writes them
    (``pkg/printers/internalversion``): ``name: used/hard`` per resource of ``spec.hard`` in
    name order, ``limits.*`` in Limit, everything else in Request."""
    hard = (obj.get("status") or {}).get("hard") or (obj.get("spec") or {}).get("hard") or {}
    used = (obj.get("status") or {}).get("used") or {}
    request: list[str] = []
    limit: list[str] = []
    for name in sorted((obj.get("spec") or {}).get("hard") or {}):
        cell = f"{name}: {used.get(name, '0')}/{hard.get(name, '0')}"
        (limit if name.split(".")[0] == "limits" and "." in name else request).append(cell)
    return [", ".join(request), ", ".join(limit)]


# Built-in kinds whose upstream printer adds columns after Age: (group, kind) -> (names, cells).
_BUILTIN_COLUMNS = {("", "ResourceQuota"): (("Request", "Limit"), _quota_columns)}


def table(
    resource_type: ResourceType,
    version: str,
    objects: list[dict[str, Any]],
    list_meta: dict[str, Any],
) -> dict[str, Any]:
    now = datetime.now(UTC)
    columns = list(resource_type.printer_columns.get(version, ()))
    has_age = any(c.json_path == ".metadata.creationTimestamp" for c in columns)
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}
    ]
    definitions += [
        {
            "name": c.name,
            "type": c.type,
            "format": "",
            "description": c.description,
            "priority": c.priority,
        }
        for c in columns
    ]
    if not has_age:
        definitions.append(
            {"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0}
        )
    builtin = _BUILTIN_COLUMNS.get((resource_type.group, resource_type.kind))
    if builtin is not None:
        definitions += [
            {"name": n, "type": "string", "format": "", "description": n, "priority": 0}
            for n in builtin[0]
        ]
    rows = []
    for obj in objects:
        metadata = obj.get("metadata") or {}
        cells: list[Any] = [metadata.get("name")]
        cells += [_cell(c, obj, now) for c in columns]
        if not has_age:
            cells.append(human_age(metadata.get("creationTimestamp"), now))
        if builtin is not None:
            cells += builtin[1](obj)
        rows.append(
            {
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": metadata,
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }
