"""Field ownership (``metadata.managedFields``) and server-side apply, simplified.

A field is a path of map keys to a leaf: a scalar, a list (every list is atomic: owned and
compared whole, where a real server would merge ``listType: map`` lists item by item) or an
empty map. Each manager entry (manager, operation ``Apply`` or ``Update``, subresource) owns a
set of such paths, shown as ``fieldsV1`` (``{"f:spec": {"f:cohortName": {}}}``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from devcluster.errors import ApiError

Path = tuple[str, ...]

# Top-level keys and metadata keys that are not fields anyone owns.
_UNTRACKED_TOP = frozenset({"apiVersion", "kind"})
_TRACKED_METADATA = frozenset({"labels", "annotations", "finalizers", "ownerReferences"})


def _leaves(value: Any, prefix: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _leaves(child, (*prefix, key), out)
    else:
        out.add(prefix)


def tracked_paths(obj: dict[str, Any]) -> set[Path]:
    """The owned-field paths of ``obj``: everything but identity and server-set metadata."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in _UNTRACKED_TOP:
            continue
        if key == "metadata":
            for meta_key, meta_value in (value or {}).items():
                if meta_key in _TRACKED_METADATA:
                    _leaves(meta_value, ("metadata", meta_key), out)
            continue
        _leaves(value, (key,), out)
    return out


def value_at(obj: Any, path: Path) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return False, None
        obj = obj[key]
    return True, obj


def set_at(obj: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        child = obj.get(key)
        if not isinstance(child, dict):
            child = obj[key] = {}
        obj = child
    if value == {} and isinstance(obj.get(path[-1]), dict):
        return  # an empty map merges into an existing one
    obj[path[-1]] = value


def delete_at(obj: dict[str, Any], path: Path) -> None:
    """Remove ``path``, then every map above it that is left empty (below the top level)."""
    parents: list[dict[str, Any]] = []
    node: Any = obj
    for key in path[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            return
        parents.append(node)
        node = node[key]
    if not isinstance(node, dict) or path[-1] not in node:
        return
    del node[path[-1]]
    for depth in range(len(path) - 2, 0, -1):
        parent = parents[depth]
        if parent[path[depth]]:
            break
        del parent[path[depth]]


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def from_fields_v1(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for key, child in tree.items():
        if key == ".":
            paths.add(prefix)
        elif key.startswith("f:"):
            if isinstance(child, dict) and child:
                paths |= from_fields_v1(child, (*prefix, key[2:]))
            else:
                paths.add((*prefix, key[2:]))
        elif prefix:
            paths.add(prefix)  # k:/v: list members: the list is atomic here
    return paths


def path_text(path: Path) -> str:
    return "." + ".".join(path)


@dataclass
class Entry:
    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    time: str
    subresource: str = ""
    paths: set[Path] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.paths),
        }
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def read_entries(obj: dict[str, Any] | None) -> list[Entry]:
    if not obj:
        return []
    entries = []
    for raw in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(raw, dict) or not raw.get("manager"):
            continue
        entries.append(
            Entry(
                manager=raw["manager"],
                operation=raw.get("operation", "Update"),
                api_version=raw.get("apiVersion", ""),
                time=raw.get("time", ""),
                subresource=raw.get("subresource", ""),
                paths=from_fields_v1(raw.get("fieldsV1") or {}),
            )
        )
    return entries


def write_entries(obj: dict[str, Any], entries: list[Entry]) -> None:
    kept = [entry.to_dict() for entry in entries if entry.paths]
    metadata = obj.setdefault("metadata", {})
    if kept:
        metadata["managedFields"] = kept
    else:
        metadata.pop("managedFields", None)


def _entry(entries: list[Entry], key: tuple[str, str, str], api_version: str, now: str) -> Entry:
    for entry in entries:
        if entry.key == key:
            return entry
    entry = Entry(
        manager=key[0], operation=key[1], subresource=key[2], api_version=api_version, time=now
    )
    entries.append(entry)
    return entry


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    subresource: str,
    now: str,
) -> None:
    """Give ``manager`` the fields a create, update or non-apply patch set or changed, taking
    them from every other manager, and write ``new``'s managedFields."""
    entries = read_entries(old)
    new_paths = tracked_paths(new)
    changed = {
        path for path in new_paths if old is None or value_at(old, path) != value_at(new, path)
    }
    for entry in entries:
        entry.paths -= changed
        entry.paths &= new_paths
    if changed:
        own = _entry(entries, (manager, "Update", subresource), api_version, now)
        own.paths |= changed
        own.time, own.api_version = now, api_version
    write_entries(new, entries)


def apply_fields(
    current: dict[str, Any],
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    api_version: str,
    subresource: str,
    now: str,
) -> dict[str, Any]:
    """Server-side apply of ``applied`` (already stripped to what the endpoint accepts) onto
    ``current`` (``{}`` when creating). Returns the new object with managedFields written;
    raises a 409 Conflict listing the fields another manager owns with a different value."""
    entries = read_entries(current)
    applied_paths = tracked_paths(applied)
    others = [entry for entry in entries if entry.manager != manager]
    conflicts: list[tuple[Entry, Path]] = []
    for entry in others:
        for path in sorted(applied_paths & entry.paths):
            _found, wanted = value_at(applied, path)
            found, existing = value_at(current, path)
            if not found or existing == wanted or (wanted == {} and isinstance(existing, dict)):
                continue
            conflicts.append((entry, path))
    if conflicts and not force:
        raise conflict_error(conflicts)
    for entry, path in conflicts:
        entry.paths.discard(path)

    result = copy.deepcopy(current)
    for path in applied_paths:
        set_at(result, path, copy.deepcopy(value_at(applied, path)[1]))
    own = _entry(entries, (manager, "Apply", subresource), api_version, now)
    # Fields this manager applied before and omits now go, unless someone else owns them (or
    # something below them, or they lead to a field applied now).
    kept = applied_paths.union(*(entry.paths for entry in entries if entry is not own))
    for path in own.paths - applied_paths:
        if not any(other[: len(path)] == path for other in kept):
            delete_at(result, path)
    own.paths = set(applied_paths)
    own.time, own.api_version = now, api_version
    result_paths = tracked_paths(result)
    for entry in entries:
        if entry is not own:
            entry.paths &= result_paths
    write_entries(result, entries)
    return result


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{entry.manager}" using {entry.api_version}',
            "field": path_text(path),
        }
        for entry, path in conflicts
    ]
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        message = (
            f'Apply failed with 1 conflict: conflict with "{entry.manager}" using '
            f"{entry.api_version}: {path_text(path)}"
        )
    else:
        by_manager: dict[tuple[str, str], list[str]] = {}
        for entry, path in conflicts:
            by_manager.setdefault((entry.manager, entry.api_version), []).append(path_text(path))
        parts = [
            f'conflicts with "{manager}" using {api_version}:\n- ' + "\n- ".join(fields)
            for (manager, api_version), fields in by_manager.items()
        ]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(parts)
    return ApiError(409, message, details={"causes": causes})
