"""Just enough of Kubernetes' protobuf encoding to read the bodies kubectl sends as protobuf
to the create-only kinds (``kubectl create token``, ``auth can-i``, ``auth whoami``): the
``k8s\\x00`` envelope (``runtime.Unknown``) and the fields of those kinds. Answers are JSON
(kubectl accepts both)."""

from __future__ import annotations

from typing import Any

from devcluster.errors import bad_request

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A schema maps a field number to (JSON name, type, repeated); a type is "string", "int" or a
# nested schema.
Schema = dict[int, tuple[str, Any, bool]]

_OBJECT_META: Schema = {1: ("name", "string", False), 3: ("namespace", "string", False)}
_RESOURCE_ATTRIBUTES: Schema = {
    1: ("namespace", "string", False),
    2: ("verb", "string", False),
    3: ("group", "string", False),
    4: ("version", "string", False),
    5: ("resource", "string", False),
    6: ("subresource", "string", False),
    7: ("name", "string", False),
}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "string", False), 2: ("verb", "string", False)}
_EXTRA_VALUE: Schema = {1: ("items", "string", True)}
_EXTRA_ENTRY: Schema = {1: ("key", "string", False), 2: ("value", _EXTRA_VALUE, False)}

SCHEMAS: dict[str, Schema] = {
    "TokenRequest": {
        1: ("metadata", _OBJECT_META, False),
        2: (
            "spec",
            {
                1: ("audiences", "string", True),
                4: ("expirationSeconds", "int", False),
                3: (
                    "boundObjectRef",
                    {
                        1: ("kind", "string", False),
                        2: ("apiVersion", "string", False),
                        3: ("name", "string", False),
                        4: ("uid", "string", False),
                    },
                    False,
                ),
            },
            False,
        ),
    },
    "SelfSubjectAccessReview": {
        1: ("metadata", _OBJECT_META, False),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRIBUTES, False),
                2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES, False),
            },
            False,
        ),
    },
    "SubjectAccessReview": {
        1: ("metadata", _OBJECT_META, False),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRIBUTES, False),
                2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES, False),
                3: ("user", "string", False),
                4: ("groups", "string", True),
                5: ("extra", _EXTRA_ENTRY, True),
                6: ("uid", "string", False),
            },
            False,
        ),
    },
    "SelfSubjectRulesReview": {
        1: ("metadata", _OBJECT_META, False),
        2: ("spec", {1: ("namespace", "string", False)}, False),
    },
    "SelfSubjectReview": {1: ("metadata", _OBJECT_META, False)},
    "TokenReview": {
        1: ("metadata", _OBJECT_META, False),
        2: ("spec", {1: ("token", "string", False), 2: ("audiences", "string", True)}, False),
    },
}
SCHEMAS["LocalSubjectAccessReview"] = SCHEMAS["SubjectAccessReview"]


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: ints for varints, bytes otherwise."""
    found: list[tuple[int, int, Any]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        value: Any
        if wire_type == 0:
            value, position = _varint(data, position)
        elif wire_type == 2:
            length, position = _varint(data, position)
            value = data[position : position + length]
            position += length
        elif wire_type == 1:
            value, position = data[position : position + 8], position + 8
        elif wire_type == 5:
            value, position = data[position : position + 4], position + 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        found.append((number, wire_type, value))
    return found


def _decode(data: bytes, schema: Schema) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for number, _wire_type, value in _fields(data):
        if number not in schema:
            continue
        name, kind, repeated = schema[number]
        if kind == "string":
            decoded: Any = bytes(value).decode()
        elif kind == "int":
            decoded = value - (1 << 64) if value >= 1 << 63 else value
        else:
            decoded = _decode(bytes(value), kind)
        if repeated:
            result.setdefault(name, []).append(decoded)
        else:
            result[name] = decoded
    if "extra" in result and isinstance(result["extra"], list):
        result["extra"] = {
            e.get("key", ""): (e.get("value") or {}).get("items", []) for e in result["extra"]
        }
    return result


def decode(body: bytes, kind: str) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded ``kind`` (only the fields the stand-in reads)."""
    if not body.startswith(MAGIC):
        raise bad_request("the request body is not Kubernetes protobuf (no k8s magic)")
    try:
        envelope = {number: value for number, _, value in _fields(body[len(MAGIC) :])}
        type_meta = {n: bytes(v).decode() for n, _, v in _fields(bytes(envelope.get(1, b"")))}
        decoded = _decode(bytes(envelope.get(2, b"")), SCHEMAS[kind])
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"the request body could not be decoded: {error}") from error
    if type_meta.get(2) and type_meta[2] != kind:
        raise bad_request(f"expected {kind}, got {type_meta[2]}")
    return {"apiVersion": type_meta.get(1, ""), "kind": kind, **decoded}
