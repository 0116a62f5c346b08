"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (as merge patch) and JSON
patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

from devcluster.errors import ApiError, bad_request


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch treated as a JSON merge patch.

    The kinds served here have no lists with a patch merge key that clients change (Pod
    containers aside), so a merge patch gives the same result for what kubectl sends. The
    ``$``-directives are honoured where they are simple (``$patch: replace`` / ``delete`` on a
    map) and otherwise dropped (``$setElementOrder/...``, ``$retainKeys``,
    ``$deleteFromPrimitiveList/...``); lists are replaced whole.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    base: dict[str, Any] = {} if directive == "replace" or not isinstance(target, dict) else target
    result = dict(base)
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        merged = strategic_merge_patch(result.get(key), value)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _resolve(document: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif isinstance(document, list) and token.isdigit() and int(token) < len(document):
            document = document[int(token)]
        else:
            raise ApiError(422, f"JSON patch: path /{'/'.join(tokens)} does not exist")
    return document


def _add(document: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _resolve(document, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise ApiError(422, f"JSON patch: index {last} out of range")
    else:
        raise ApiError(422, "JSON patch: parent is not a container")
    return document


def _remove(document: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise ApiError(422, "JSON patch: cannot remove the whole document")
    parent = _resolve(document, tokens[:-1])
    last = tokens[-1]
    _resolve(parent, [last])  # raises when missing
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return document


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"invalid JSON patch operation: {operation!r}")
        op, tokens = operation["op"], _pointer(operation["path"])
        if op == "add":
            document = _add(document, tokens, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            document = _remove(document, tokens)
        elif op == "replace":
            _resolve(document, tokens)
            document = _remove(document, tokens) if tokens else document
            document = _add(document, tokens, copy.deepcopy(operation.get("value")))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from", ""))
            value = copy.deepcopy(_resolve(document, source))
            if op == "move":
                document = _remove(document, source)
            document = _add(document, tokens, value)
        elif op == "test":
            if _resolve(document, tokens) != operation.get("value"):
                raise ApiError(422, f"JSON patch: test failed at {operation['path']}")
        else:
            raise bad_request(f"unknown JSON patch operation {op!r}")
    return document
