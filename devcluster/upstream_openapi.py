"""Kubernetes' own schemas for the built-in kinds, served in the OpenAPI v3 documents so that
``kubectl explain resourcequota.spec.hard`` answers as a real server does.

The schemas come from the ``kubernetes-validate`` package (already a dependency of the portal):
its ``vX.Y.0-local/_definitions.json`` is upstream's OpenAPI definitions, descriptions included,
in JSON Schema form. They are turned back into OpenAPI v3 the way kube-apiserver writes it:
``$ref`` under ``#/components/schemas/``, a reference with a description wrapped in
``allOf``, a single type instead of ``[type, "null"]``, and Quantity / IntOrString with the
description and ``oneOf`` kube-apiserver gives them (no ``type``, so explain names them).
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

_LOCAL_DIR = re.compile(r"v(\d+)\.(\d+)\.\d+-local")
_DEF_PREFIX = "#/$defs/"
_COMPONENT_PREFIX = "#/components/schemas/"

# kube-apiserver's OpenAPI v3 for these two (their OpenAPIV3OneOfTypes): ``oneOf``, no ``type``.
_ONE_OF_KINDS = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "description": (
            "Quantity is a fixed-point representation of a number. It provides convenient "
            "marshaling/unmarshaling in JSON and YAML, in addition to String() and AsInt64() "
            "accessors."
        ),
        "oneOf": [{"type": "string"}, {"type": "number"}],
    },
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "description": (
            "IntOrString is a type that can hold an int32 or a string.  When used in JSON or "
            "YAML marshalling and unmarshalling, it produces or consumes the inner type.  This "
            "allows you to have, for example, a JSON field that can accept a name or number."
        ),
        "format": "int-or-string",
        "oneOf": [{"type": "integer"}, {"type": "string"}],
    },
}


def _schema_root() -> Any:
    return resources.files("kubernetes_validate") / "kubernetes-json-schema"


@functools.cache
def _definitions(minor: tuple[int, int]) -> dict[str, Any]:
    """Upstream's definitions for the shipped release closest to ``minor`` (the same one, else
    the newest older one, else the oldest shipped); empty if the package is missing."""
    try:
        entries = {
            (int(m.group(1)), int(m.group(2))): entry
            for entry in _schema_root().iterdir()
            if (m := _LOCAL_DIR.fullmatch(entry.name))
        }
    except (ModuleNotFoundError, FileNotFoundError):
        return {}
    if not entries:
        return {}
    older = [version for version in entries if version <= minor]
    chosen = max(older) if older else min(entries)
    document = json.loads((entries[chosen] / "_definitions.json").read_text())
    defs: dict[str, Any] = document.get("$defs") or document.get("definitions") or {}
    return defs


def _minor(git_version: str) -> tuple[int, int]:
    major, minor = git_version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def _convert(node: Any, refs: set[str]) -> Any:
    if isinstance(node, list):
        return [_convert(item, refs) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(_DEF_PREFIX):
            name = value[len(_DEF_PREFIX) :]
            refs.add(name)
            out[key] = _COMPONENT_PREFIX + name
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            out[key] = types[0] if len(types) == 1 else types
        elif key in ("properties", "patternProperties"):
            out[key] = {name: _convert(sub, refs) for name, sub in value.items()}
        else:
            out[key] = _convert(value, refs)
    if "$ref" in out and len(out) > 1:
        # OpenAPI 3.0 ignores siblings of $ref: kube-apiserver wraps the reference in allOf.
        ref = out.pop("$ref")
        out = {"allOf": [{"$ref": ref}], **out}
    return out


@functools.cache
def schemas_for(git_version: str, group: str, version: str, kind: str) -> dict[str, Any]:
    """``{name: schema}`` of the kind's upstream schema (first) and every schema it refers to,
    in OpenAPI v3 form; empty when upstream has no such kind. Cached: callers do not change
    it."""
    defs = _definitions(_minor(git_version))
    wanted = {"group": group, "version": version, "kind": kind}
    root = next(
        (
            name
            for name, schema in defs.items()
            if wanted in (schema.get("x-kubernetes-group-version-kind") or [])
            and not name.endswith("List")
        ),
        None,
    )
    if root is None:
        return {}
    found: dict[str, Any] = {}
    pending = [root]
    while pending:
        name = pending.pop()
        if name in found or name not in defs:
            continue
        if name in _ONE_OF_KINDS:
            found[name] = dict(_ONE_OF_KINDS[name])
            continue
        refs: set[str] = set()
        found[name] = _convert(defs[name], refs)
        pending.extend(sorted(refs - found.keys()))
    return found


def root_name(schemas: dict[str, Any]) -> str:
    return next(iter(schemas))
