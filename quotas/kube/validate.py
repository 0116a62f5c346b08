"""Check compiled Kubernetes objects the way the API server and the admission webhooks would.

Pure Python, no Django: the compiler, the local API stand-in and the tests call it alike.

* Built-in kinds (Namespace, ResourceQuota, LimitRange, NetworkPolicy, ServiceAccount,
  RoleBinding, PriorityClass, ConfigMap, ...) are checked against the OpenAPI schemas that the
  ``kubernetes-validate`` package ships, in their *strict* form (an unknown field is an error).
  We load its files and run jsonschema ourselves rather than call
  ``kubernetes_validate.validate()``, which stops at the first error, re-reads the 1.5 MB
  definitions file on every call and compares versions as strings. Its schemas accept any
  string as a Quantity; here a quantity must parse (``quotas.quantity.parse_quantity``).
* Schemas are checked by ``jsonschema_rs`` (compiled Rust) first; only when it refuses does
  the Python ``jsonschema`` validator run again, to word the refusal, so messages are the
  same either way (``tests/kube/test_validate_rust.py`` checks the two agree on many broken
  objects). The portal's keywords (quantities, list types) are the same Python code in both.
* Kueue and Volcano objects are checked against the ``openAPIV3Schema`` of the version they
  name, from the CRDs in ``quotas/kube/crds/``. The schema is closed first
  (``additionalProperties: false`` wherever it lists properties and does not say
  ``x-kubernetes-preserve-unknown-fields``) because the API server would prune an unknown field
  silently and the portal's intent would be lost. ``x-kubernetes-int-or-string`` quantities
  accept ``16`` and ``"16"`` and must parse; ``x-kubernetes-list-type: map|set`` entries must be
  unique; ``null`` in a non-nullable field is dropped first, as the API server does. Kueue's
  deprecated ``v1beta1`` is refused: the portal writes ``v1beta2`` only.
* Every object: ``apiVersion``, ``kind`` and ``metadata.name`` are present; names, namespaces,
  label keys and values and annotation keys are well formed; a namespaced kind has
  ``metadata.namespace`` and a cluster-scoped one does not.

CEL rules: every ``x-kubernetes-validations`` rule of every CRD in ``quotas/kube/crds/``
(Kueue and Volcano, whatever version the object names) is evaluated by a real CEL engine
(``quotas.kube.cel``, on cel-python) from the CRD files as written, the way the API server
runs them: after schema defaults, on every value the rule's schema node describes, with
messages in the API server's words (``spec: Invalid value: "object": <message>``). They do
not run when the object has a value of the wrong type (the API server's "some validation
rules were not checked"). With ``old`` (``validate_object(obj, old=...)``, the stored object)
the check is an update's: transition rules (``oldSelf``) run where the old value can be
correlated, and a failure on an unchanged value is dropped (validation ratcheting).
``transition_issues`` runs the transition rules alone; the applier calls it before an update.

Webhook rules, checked in code because they are Go code in Kueue's and Volcano's admission
webhooks, not CEL (Kueue v1beta2, Volcano v1beta1):

* ClusterQueue and Cohort ``resourceGroups``: flavors list the resources of
  ``coveredResources`` by name in the same order ("must match the name in
  coveredResources"); a resource and a flavor appear in one resource group only; resource
  names are qualified names; ``nominalQuota``, ``borrowingLimit`` and ``lendingLimit`` are >=
  0; at most 256 flavors and 256 covered resources in all, 512 flavor-resource pairs per
  group.
* ClusterQueue: ``lendingLimit`` must be nil when ``cohortName`` is empty (the CRD's CEL rule
  says so of ``borrowingLimit``) and <= ``nominalQuota``; ``fairSharing.weight`` >= 0 and,
  when not 0, > 1n; ``admissionChecksStrategy`` ``onFlavors`` name flavors of this
  ClusterQueue; ``namespaceSelector`` is a valid label selector. Portal rule: a null or absent
  ``namespaceSelector`` (selects no namespace) and ``{}`` (selects every namespace) are errors.
* Cohort: ``borrowingLimit`` / ``lendingLimit`` need ``parentName``; ``fairSharing.weight``.
* LocalQueue: ``spec.clusterQueue`` must be set (portal rule); ``fairSharing.weight``.
* ResourceFlavor (Kueue's ``ValidateResourceFlavor``): ``nodeLabels`` keys are qualified names
  and values label values; ``nodeTaints`` keys qualified names, values label values, an
  effect given, unique by key and effect; ``tolerations`` keys, when set, qualified names.
* Volcano Queue (v1.15.1, the version of ``crds/``): quantities >= 0 (whole numbers for
  extended resources); deserved <= capability and guarantee <= deserved for each resource
  the larger list names, a resource it does not name being unrestricted (guarantee is not
  compared with capability; v1.14 counted a missing resource as 0 and did); a queue is not
  its own parent. ``weight`` 1..65535 is in the schema.
* PriorityClass (API server): the name does not start with ``system-`` and ``value`` <= 1e9.
* A batch (``validate_objects``) holds each object once.

Skipped, and why:

* Webhook rules that need the stored object: the ClusterQueue webhook's
  ``concurrentAdmissionPolicy`` immutability (feature-gated; the portal does not set it).
  (CRD transition rules do run, given ``old``.)
* Rules that need other objects: Volcano hierarchy (parent exists, children's guarantee and
  deserved sums, child capability <= parent's), Volcano hierarchy annotations; whether flavors,
  cohorts and ClusterQueues that objects name exist.
* Kueue's Workload and WorkloadPriorityClass webhooks: the portal writes neither (it patches
  a Workload's ``spec.active``); the Workload CRD's CEL rules do run, ``status`` ones too.
* CEL functions cel-python lacks and ``quotas.kube.cel`` does not add (``quantity``, ``url``,
  ``ip``, ``format``, optional syntax ``a.?b``): a rule using one reports a compile error; no
  rule in the CRDs here does (a test says so).
* The CEL cost budget: rules here are small, and cel-python does not count cost.
* Semantic quota rules Kubernetes does not enforce at this layer, such as ``limits.`` keys for
  extended resources in a ResourceQuota: the compiler's job.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.metadata
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Final, NamedTuple

import jsonschema
import jsonschema_rs
import yaml
from referencing import Registry, Resource

from quotas.kube.cel import MapKey, Violation, check_crd_rules
from quotas.kube.memo import ValidationMemo, object_digest
from quotas.quantity import QuantityError, parse_quantity

__all__ = [
    "core_schema_version",
    "crd_versions",
    "find_crd",
    "is_namespaced",
    "load_crds",
    "shipped_kubernetes_versions",
    "transition_issues",
    "validate_object",
    "validate_objects",
]

CRD_DIR: Final = Path(__file__).resolve().parent / "crds"
PORTAL_KUEUE_VERSION: Final = "v1beta2"

_SCHEMA_ROOT: Final = resources.files("kubernetes_validate") / "kubernetes-json-schema"
_DEFINITIONS_URI: Final = "https://kubernetes.io/api/_definitions.json"
_QUANTITY_DEF: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_OBJECT_META_DEF: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_VERSION_RE: Final = re.compile(r"v?(\d+)\.(\d+)(?:[.+-].*)?")
_SHIPPED_DIR_RE: Final = re.compile(r"v(\d+)\.(\d+)\.\d+-local-strict")
_KIND_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_API_VERSION_RE: Final = re.compile(r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+[a-z0-9]*")
_DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_QUALIFIED_NAME_PART: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_PLAIN_KEY: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_QUANTITY_PATTERN_MARK: Final = "[KMGTPE]i"
_ANNOTATIONS_MAX_BYTES: Final = 256 * 1024

# Built-in kinds that are cluster-scoped; every other built-in kind is namespaced.
_CLUSTER_SCOPED_BUILTINS: Final = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterCIDR",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterTrustBundle",
        "ComponentStatus",
        "CSIDriver",
        "CSINode",
        "CustomResourceDefinition",
        "DeviceClass",
        "DeviceTaintRule",
        "FlowSchema",
        "IngressClass",
        "IPAddress",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PodSecurityPolicy",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "ResourceSlice",
        "RuntimeClass",
        "SelfSubjectAccessReview",
        "SelfSubjectReview",
        "SelfSubjectRulesReview",
        "ServiceCIDR",
        "StorageClass",
        "StorageVersion",
        "StorageVersionMigration",
        "SubjectAccessReview",
        "TokenReview",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
        "VolumeAttributesClass",
    }
)
_RBAC_KINDS: Final = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
# Names used as label values (kueue.x-k8s.io/queue-name, kueue.x-k8s.io/priority-class).
_LABEL_VALUE_NAMED_KINDS: Final = frozenset({"LocalQueue", "WorkloadPriorityClass"})
_HIGHEST_USER_PRIORITY: Final = 1_000_000_000
# Fields renamed or moved between API versions: (kind, path without indexes) -> hint.
_RENAMED_FIELDS: Final = {
    ("ClusterQueue", "spec.cohort"): "v1beta2 calls it spec.cohortName",
    ("ClusterQueue", "spec.admissionChecks"): (
        "v1beta2 moved it to spec.admissionChecksStrategy.admissionChecks[].name"
    ),
    ("Cohort", "spec.parent"): "v1beta2 calls it spec.parentName",
    ("Workload", "spec.priorityClassName"): "v1beta2 uses spec.priorityClassRef",
    ("Workload", "spec.priorityClassSource"): "v1beta2 uses spec.priorityClassRef",
}

FieldPath = tuple[str | int, ...]
Issue = tuple[FieldPath, str]


# A map key (label, resource name) in a field path: always shown in brackets.
_Key = MapKey


# --------------------------------------------------------------------------- versions


@functools.cache
def shipped_kubernetes_versions() -> tuple[str, ...]:
    """Kubernetes minor versions ("1.25", ...) whose strict schemas kubernetes-validate ships."""
    found = set()
    for entry in _SCHEMA_ROOT.iterdir():
        if match := _SHIPPED_DIR_RE.fullmatch(entry.name):
            found.add((int(match.group(1)), int(match.group(2))))
    if not found:
        raise RuntimeError("kubernetes-validate ships no strict schemas: is it installed?")
    return tuple(f"{major}.{minor}" for major, minor in sorted(found))


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


@functools.cache
def core_schema_version(kubernetes_version: str) -> str:
    """The shipped schema version used for a cluster running ``kubernetes_version``.

    The same minor when it is shipped; the newest shipped one for a newer cluster (new fields
    of the newer release then read as unknown, and the message says which schemas were used);
    the oldest shipped one for an older cluster; for a minor missing in between, the closest
    older one. ``"1.33"``, ``"v1.33.4"`` and ``"1.33.4-gke.1200"`` all mean 1.33.
    """
    match = _VERSION_RE.fullmatch(kubernetes_version.strip())
    if match is None:
        raise ValueError(f"{kubernetes_version!r} is not a Kubernetes version such as '1.33'")
    wanted = (int(match.group(1)), int(match.group(2)))
    shipped = [_minor(version) for version in shipped_kubernetes_versions()]
    if wanted >= shipped[-1]:
        chosen = shipped[-1]
    elif wanted <= shipped[0]:
        chosen = shipped[0]
    else:
        chosen = max(version for version in shipped if version <= wanted)
    return f"{chosen[0]}.{chosen[1]}"


def _version_note(kubernetes_version: str, schema_version: str) -> str:
    match = _VERSION_RE.fullmatch(kubernetes_version.strip())
    wanted = f"{match.group(1)}.{match.group(2)}" if match else kubernetes_version
    if wanted == schema_version:
        return ""
    return (
        f" (checked against the Kubernetes {schema_version} schemas, the closest that "
        f"kubernetes-validate ships, for a {wanted} cluster)"
    )


# --------------------------------------------------------------------------- jsonschema glue


def _short(value: object, limit: int = 60) -> str:
    try:
        text = json.dumps(value, default=str, sort_keys=True)
    except TypeError:  # keys of mixed types cannot be sorted
        text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quantity_keyword(validator: Any, enabled: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``x-portal-quantity``: strings and numbers must be Kubernetes quantities."""
    if not enabled or isinstance(instance, bool):
        return
    if isinstance(instance, float):
        instance = Decimal(repr(instance))
    if isinstance(instance, str | int | Decimal):
        try:
            parse_quantity(instance)
        except QuantityError as error:
            yield jsonschema.ValidationError(str(error))


def _list_type_keyword(validator: Any, list_type: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``x-kubernetes-list-type``: map entries are unique by their keys, set items unique."""
    if not isinstance(instance, list) or list_type not in ("map", "set"):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        if list_type == "map":
            if not isinstance(item, dict):
                continue
            identity = {key: item.get(key) for key in keys}
            shown = ", ".join(f"{key}={_short(value)}" for key, value in identity.items())
        else:
            identity, shown = item, _short(item)
        fingerprint = _short(identity, limit=1 << 20)
        if fingerprint in seen:
            yield jsonschema.ValidationError(
                f"duplicate entry {shown}: already at index {seen[fingerprint]}", path=(index,)
            )
        else:
            seen[fingerprint] = index


_CoreValidator: Final[Any] = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"x-portal-quantity": _quantity_keyword}
)
# OpenAPI v3.0 schemas are closest to draft 4 (boolean exclusiveMinimum, no 1.0 integers).
_CrdValidator: Final[Any] = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    {"x-portal-quantity": _quantity_keyword, "x-kubernetes-list-type": _list_type_keyword},
)


@functools.lru_cache(maxsize=4096, typed=True)
def _quantity_problem(instance: str | int | float) -> str | None:
    """``_quantity_keyword``'s refusal of one scalar, remembered (the same few quantities
    recur in every object); typed, so 1, 1.0 and "1" stay apart."""
    for error in _quantity_keyword(None, True, instance, None):
        return str(error.message)
    return None


class _RustQuantityKeyword:
    """``x-portal-quantity`` for jsonschema_rs: the same check as ``_quantity_keyword``."""

    def __init__(self, parent_schema: Any, value: Any, schema_path: Any) -> None:
        self.enabled = value

    def validate(self, instance: Any) -> None:
        if not self.enabled or isinstance(instance, bool):
            return
        if isinstance(instance, str | int | float):
            problem = _quantity_problem(instance)
            if problem is not None:
                raise ValueError(problem)
            return
        for error in _quantity_keyword(None, self.enabled, instance, None):
            raise ValueError(error.message)


class _RustListTypeKeyword:
    """``x-kubernetes-list-type`` for jsonschema_rs: the same check as ``_list_type_keyword``."""

    def __init__(self, parent_schema: Any, value: Any, schema_path: Any) -> None:
        self.list_type, self.schema = value, parent_schema

    def validate(self, instance: Any) -> None:
        for error in _list_type_keyword(None, self.list_type, instance, self.schema):
            raise ValueError(error.message)


class _TwoStageValidator:
    """A jsonschema_rs validator first (compiled Rust, a fraction of the Python one's time),
    and the Python ``jsonschema`` one only when it refuses, for the messages: the Python path
    words every message, so a refusal reads the same either way. Formats are not asserted
    (the Python validators have no format checker either). An instance the Rust one cannot
    take (a non-string key, a Decimal) goes to the Python one too."""

    def __init__(self, python: Any, rust: Any) -> None:
        self.python, self.rust = python, rust

    def iter_errors(self, instance: Any) -> Iterator[Any]:
        try:
            if self.rust.is_valid(instance):
                return iter(())
        except ValueError:
            pass  # not JSON-like for Rust: the Python validator decides
        return iter(self.python.iter_errors(instance))


_RUST_OPTIONS: Final[dict[str, Any]] = {
    "validate_formats": False,
    "keywords": {
        "x-portal-quantity": _RustQuantityKeyword,
        "x-kubernetes-list-type": _RustListTypeKeyword,
    },
}
# Built-in kinds: their Python validator (``_CoreValidator``) does not check
# ``x-kubernetes-list-type`` (the API server validates them in Go, which keeps, say, a repeated
# env name with a warning), so the Rust one does not either: both stages give one answer.
_RUST_CORE_OPTIONS: Final[dict[str, Any]] = {
    "validate_formats": False,
    "keywords": {"x-portal-quantity": _RustQuantityKeyword},
}


def _is_quantity_schema(schema: Mapping[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string")) and _QUANTITY_PATTERN_MARK in str(
        schema.get("pattern", "")
    )


def _close_schema(node: Any) -> Any:
    """A copy of a structural schema as strict JSON Schema (see the module docstring)."""
    if isinstance(node, list):
        return [_close_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: _close_schema(sub) for name, sub in value.items()}
        elif key in ("description", "x-kubernetes-validations"):
            continue
        else:
            out[key] = _close_schema(value)
    if node.get("x-kubernetes-embedded-resource"):
        # apiVersion, kind and metadata are implied; metadata is ObjectMeta, left open here.
        properties = out.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        if "properties" not in properties.get("metadata", {}):
            properties["metadata"] = {"type": "object"}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node and "type" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if _is_quantity_schema(node):
        del out["pattern"]  # replaced by a parser whose messages say what is wrong
        out["x-portal-quantity"] = True
    if node.get("type") == "integer" and node.get("format") in ("int32", "int64"):
        bits = 31 if node["format"] == "int32" else 63
        out.setdefault("minimum", -(2**bits))
        out.setdefault("maximum", 2**bits - 1)
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    is_object = node.get("type") == "object" or "properties" in node
    if (
        is_object
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _drop_nulls(data: Any, schema: Any) -> Any:
    """A copy of ``data`` without nulls where the schema is not nullable (the API server prunes
    them before validation)."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(data, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        out = {}
        for key, value in data.items():
            sub = properties.get(key, additional if isinstance(additional, dict) else None)
            if value is None and sub is not None and not sub.get("nullable"):
                continue
            out[key] = _drop_nulls(value, sub)
        return out
    if isinstance(data, list):
        return [_drop_nulls(item, schema.get("items")) for item in data]
    return data


def _join(path: Iterable[str | int]) -> str:
    """Kubernetes field-path text: ``spec.hard[requests.nvidia.com/gpu]``, ``a.b[0].c``."""
    out = ""
    for part in path:
        if isinstance(part, int | _Key):
            out += f"[{part}]"
        elif not isinstance(part, str):
            out += f"[{part!r}]"
        elif _PLAIN_KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def _unknown_field(kind: str, path: Sequence[str | int], key: str, known: Iterable[str]) -> str:
    reason = f'unknown field "{key}": the API server would drop it silently'
    plain = ".".join(str(part) for part in (*path, key) if isinstance(part, str))
    if hint := _RENAMED_FIELDS.get((kind, plain)):
        return f"{reason} ({hint})"
    if close := difflib.get_close_matches(key, list(known), n=1, cutoff=0.7):
        return f'{reason} (did you mean "{close[0]}"?)'
    return reason


def _schema_issues(error: Any, kind: str, note: str = "") -> Iterator[Issue]:
    """Plain messages for one jsonschema error."""
    path: FieldPath = tuple(error.absolute_path)
    validator, value, instance = error.validator, error.validator_value, error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    if validator == "additionalProperties" and value is False and isinstance(instance, dict):
        known = schema.get("properties") or {}
        patterns = schema.get("patternProperties") or {}
        for key in instance:
            if key not in known and not any(re.search(pattern, key) for pattern in patterns):
                yield (*path, key), _unknown_field(kind, path, key, known) + note
    elif validator == "required" and isinstance(instance, dict):
        for name in value:
            if name not in instance:
                yield (*path, name), "required field is missing"
    elif validator == "enum":
        allowed = ", ".join(str(option) for option in value)
        yield path, f"unsupported value {_short(instance)}: must be one of {allowed}"
    elif validator == "type":
        wanted = " or ".join(value) if isinstance(value, list) else value
        yield path, f"must be of type {wanted}, got {_short(instance)}"
    elif validator == "anyOf" and schema.get("x-kubernetes-int-or-string"):
        yield (
            path,
            f'must be an integer or a string such as "500m" or "64Gi", got {_short(instance)}',
        )
    elif validator == "pattern" and value == "^" + _DNS1123_SUBDOMAIN.pattern + "$":
        yield (
            path,
            f"{_short(instance)} is not a valid name: use lowercase letters, digits, '-' and '.' "
            "(an RFC 1123 subdomain), starting and ending with a letter or digit",
        )
    else:
        yield path, str(error.message)


# --------------------------------------------------------------------------- core kinds


@functools.lru_cache(maxsize=8)
def _core_definitions(schema_version: str) -> dict[str, Any]:
    folder = _SCHEMA_ROOT / f"v{schema_version}.0-local-strict"
    definitions: dict[str, Any] = json.loads(
        (folder / "_definitions.json").read_text(encoding="utf-8")
    )
    definitions["$defs"][_QUANTITY_DEF] = {
        "type": ["string", "number", "null"],
        "x-portal-quantity": True,
    }
    return definitions


@functools.lru_cache(maxsize=8)
def _core_registry(schema_version: str) -> Any:
    return Resource.from_contents(_core_definitions(schema_version)) @ Registry()


@functools.lru_cache(maxsize=8)
def _core_rust_registry(schema_version: str) -> Any:
    return jsonschema_rs.Registry([(_DEFINITIONS_URI, _core_definitions(schema_version))])


def _core_two_stage(schema_version: str, schema: dict[str, Any]) -> _TwoStageValidator:
    return _TwoStageValidator(
        _CoreValidator(schema, registry=_core_registry(schema_version)),
        jsonschema_rs.Draft202012Validator(
            schema, registry=_core_rust_registry(schema_version), **_RUST_CORE_OPTIONS
        ),
    )


@functools.lru_cache(maxsize=256)
def _core_validator(schema_version: str, api_version: str, kind: str) -> Any | None:
    if not (_KIND_RE.fullmatch(kind) and _API_VERSION_RE.fullmatch(api_version)):
        return None
    # The package's file naming: rbac.authorization.k8s.io/v1 -> rbac-v1, v1 -> v1.
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_file = _SCHEMA_ROOT / f"v{schema_version}.0-local-strict" / f"{kind.lower()}-{api}.json"
    if not schema_file.is_file():
        return None
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    return _core_two_stage(schema_version, schema)


@functools.lru_cache(maxsize=8)
def _object_meta_validator(schema_version: str) -> Any:
    schema = {"$ref": f"{_DEFINITIONS_URI}#/$defs/{_OBJECT_META_DEF}"}
    return _core_two_stage(schema_version, schema)


# --------------------------------------------------------------------------- CRDs


@functools.cache
def _crd_index() -> dict[tuple[str, str], Path]:
    """(group, kind) -> CRD file, read from each file's head so nothing large is parsed."""
    index: dict[tuple[str, str], Path] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        cut = text.find("\n  versions:")
        head = yaml.load(text[:cut] if cut > 0 else text, Loader=_LOADER)  # noqa: S506  # safe
        spec = head["spec"]
        index[(spec["group"], spec["names"]["kind"])] = path
    return index


@functools.lru_cache(maxsize=16)
def _load_crd_file(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as stream:
        document: dict[str, Any] = yaml.load(stream, Loader=_LOADER)  # noqa: S506  # safe
    return document


def load_crds() -> list[dict[str, Any]]:
    """Every CRD in ``quotas/kube/crds/``, parsed (cached: do not mutate the documents)."""
    return [_load_crd_file(path) for path in _crd_index().values()]


def find_crd(group: str, kind: str) -> dict[str, Any] | None:
    """The CRD for (group, kind), parsing only that file; None when the portal has none."""
    path = _crd_index().get((group, kind))
    return _load_crd_file(path) if path is not None else None


@functools.cache
def crd_versions() -> dict[tuple[str, str], dict[str, Any]]:
    """(``group/version`` apiVersion, kind) -> openAPIV3Schema, for every served version."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for crd in load_crds():
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served"):
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                out[key] = version["schema"]["openAPIV3Schema"]
    return out


@functools.lru_cache(maxsize=64)
def _crd_validator(group: str, version: str, kind: str) -> Any:
    crd = find_crd(group, kind)
    assert crd is not None  # callers look the CRD up first
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    raw = served["schema"]["openAPIV3Schema"]
    closed = _close_schema(raw)
    closed["properties"]["metadata"] = {"type": "object"}  # checked against ObjectMeta instead
    return _TwoStageValidator(
        _CrdValidator(closed), jsonschema_rs.Draft4Validator(closed, **_RUST_OPTIONS)
    )


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def is_namespaced(api_version: str, kind: str) -> bool | None:
    """Whether objects of this kind live in a namespace: from the CRD's scope for Kueue and
    Volcano kinds (None for a kind their groups do not have); for built-in kinds, True unless
    the kind is one of the cluster-scoped ones (Namespace, PriorityClass, ClusterRole, ...)."""
    group, _ = _split_api_version(api_version)
    if (group, kind) in _crd_index():
        crd = find_crd(group, kind)
        return crd is not None and crd["spec"]["scope"] == "Namespaced"
    if any(known_group == group for known_group, _ in _crd_index()):
        return None
    return kind not in _CLUSTER_SCOPED_BUILTINS


# --------------------------------------------------------------------------- metadata


def _qualified_name_problems(value: str) -> list[str]:
    prefix, slash, name = value.rpartition("/")
    problems = []
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        problems.append(f"the prefix {prefix!r} must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME_PART.fullmatch(name):
        problems.append(
            "the name part must be 1-63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return problems


def _label_value_problem(value: str) -> str | None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        return (
            "must be at most 63 characters of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def _name_issues(kind: str, name: str) -> Iterator[Issue]:
    path: FieldPath = ("metadata", "name")
    if kind == "Namespace":
        if len(name) > 63 or not _DNS1123_LABEL.fullmatch(name):
            yield (
                path,
                f'"{name}" must be a DNS-1123 label (lowercase letters, digits and "-", at most 63)',
            )
        return
    if kind in _RBAC_KINDS:
        if name in (".", "..") or "/" in name or "%" in name:
            yield path, f'"{name}" may not be "." or ".." nor contain "/" or "%"'
        return
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        yield (
            path,
            f'"{name}" must be a DNS-1123 subdomain (lowercase letters, digits, "-" and ".", '
            "starting and ending with a letter or digit, at most 253)",
        )
    elif kind in _LABEL_VALUE_NAMED_KINDS and len(name) > 63:
        yield path, f"must be at most 63 characters: a {kind} name is used as a label value"
    if kind == "PriorityClass" and name.startswith("system-"):
        yield path, 'the "system-" prefix is reserved for Kubernetes\' own PriorityClasses'


def _metadata_issues(obj: Mapping[str, Any], kind: str, namespaced: bool | None) -> Iterator[Issue]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        yield ("metadata",), "required field is missing (metadata.name at least)"
        return
    name = metadata.get("name")
    if not name:
        yield ("metadata", "name"), "required field is missing"
    elif isinstance(name, str):
        yield from _name_issues(kind, name)
    namespace = metadata.get("namespace")
    if namespaced is True and not namespace:
        yield ("metadata", "namespace"), f"required: {kind} is namespaced"
    elif namespaced is False and namespace:
        yield ("metadata", "namespace"), f"must not be set: {kind} is cluster-scoped"
    if isinstance(namespace, str) and namespace and not _DNS1123_LABEL.fullmatch(namespace):
        yield ("metadata", "namespace"), f'"{namespace}" must be a DNS-1123 label'
    labels = metadata.get("labels")
    for key, value in labels.items() if isinstance(labels, dict) else ():
        for problem in _qualified_name_problems(str(key)):
            yield ("metadata", "labels", _Key(key)), f"invalid label key: {problem}"
        if isinstance(value, str) and (bad := _label_value_problem(value)):
            yield ("metadata", "labels", _Key(key)), f"invalid label value {_short(value)}: {bad}"
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            for problem in _qualified_name_problems(str(key)):
                yield ("metadata", "annotations", _Key(key)), f"invalid annotation key: {problem}"
        size = sum(len(str(k)) + len(str(v or "")) for k, v in annotations.items())
        if size > _ANNOTATIONS_MAX_BYTES:
            yield ("metadata", "annotations"), f"total size {size} B is over the 256 KiB limit"


# --------------------------------------------------------------------------- CEL and webhooks


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _quantity(value: Any) -> Decimal | None:
    """A parsed quantity, or None when absent or malformed (the schema reports those)."""
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _label_selector_issues(selector: dict[str, Any], path: FieldPath) -> Iterator[Issue]:
    for key, value in _dict(selector.get("matchLabels")).items():
        for problem in _qualified_name_problems(str(key)):
            yield (*path, "matchLabels", _Key(key)), f"invalid label key: {problem}"
        if isinstance(value, str) and (bad := _label_value_problem(value)):
            yield (*path, "matchLabels", _Key(key)), f"invalid label value {_short(value)}: {bad}"
    for index, expression in enumerate(_list(selector.get("matchExpressions"))):
        expression, where = _dict(expression), (*path, "matchExpressions", index)
        match_key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values")
        if isinstance(match_key, str):
            for problem in _qualified_name_problems(match_key):
                yield (*where, "key"), f"invalid label key: {problem}"
        if operator in ("In", "NotIn") and not values:
            yield (*where, "values"), f"must be specified when operator is {operator}"
        elif operator in ("Exists", "DoesNotExist") and values:
            yield (*where, "values"), f"may not be specified when operator is {operator}"
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            yield (
                (*where, "operator"),
                f"{_short(operator)} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)",
            )


def _namespace_selector_issues(spec: dict[str, Any]) -> Iterator[Issue]:
    path: FieldPath = ("spec", "namespaceSelector")
    pin = "select the tenant's namespace, e.g. matchLabels: {kubernetes.io/metadata.name: <namespace>}"
    selector = spec.get("namespaceSelector")
    if selector is None:
        yield (
            path,
            "must be set: a null namespaceSelector selects no namespace, so no LocalQueue "
            f"could submit workloads to this ClusterQueue; {pin}",
        )
    elif isinstance(selector, dict):
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            yield (
                path,
                "{} selects every namespace, so any tenant could submit workloads to this "
                f"ClusterQueue and spend its quota; {pin}",
            )
        else:
            yield from _label_selector_issues(selector, path)


class _Parent(NamedTuple):
    """Where a ClusterQueue (its cohort) or a Cohort (its parent) names what it lends to and
    borrows from, and whether it names one."""

    is_cohort: bool
    field: str
    word: str
    present: bool


def _resource_group_issues(spec: dict[str, Any], *, is_cohort: bool) -> Iterator[Issue]:
    field_name, word = ("parentName", "parent") if is_cohort else ("cohortName", "cohort")
    parent = _Parent(is_cohort, field_name, word, bool(spec.get(field_name)))
    groups = [_dict(group) for group in _list(spec.get("resourceGroups"))]
    seen_resources: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    for i, group in enumerate(groups):
        base = ("spec", "resourceGroups", i)
        covered = _covered_resources(group)
        yield from _covered_resource_issues(covered, base, i, seen_resources)
        flavors = [_dict(flavor) for flavor in _list(group.get("flavors"))]
        for j, flavor in enumerate(flavors):
            yield from _flavor_issues(
                flavor,
                (*base, "flavors", j),
                group=i,
                covered=covered,
                seen=seen_flavors,
                parent=parent,
            )
        pairs = sum(len(_list(flavor.get("resources"))) for flavor in flavors)
        if pairs > 512:
            yield (
                base,
                f"number of flavor-resource combinations in a resourceGroup must be <= 512, got {pairs}",
            )
    yield from _resource_group_totals_issues(groups)


def _covered_resources(group: dict[str, Any]) -> list[str]:
    return [name for name in _list(group.get("coveredResources")) if isinstance(name, str)]


def _covered_resource_issues(
    covered: list[str], base: FieldPath, group: int, seen: dict[str, int]
) -> Iterator[Issue]:
    """Each covered resource a valid name, in one resource group only (``seen``: the group
    that first covered each name, updated)."""
    for j, name in enumerate(covered):
        for problem in _qualified_name_problems(name):
            yield (*base, "coveredResources", j), f"invalid resource name {name!r}: {problem}"
        if name not in seen:
            seen[name] = group
            continue
        where = "this group" if seen[name] == group else f"resourceGroups[{seen[name]}]"
        yield (
            (*base, "coveredResources", j),
            f'duplicate resource "{name}", already covered in {where}: each resource '
            "may appear in only one resource group",
        )


def _flavor_issues(
    flavor: dict[str, Any],
    fpath: FieldPath,
    *,
    group: int,
    covered: list[str],
    seen: dict[str, int],
    parent: _Parent,
) -> Iterator[Issue]:
    """A flavor of a resource group: in one group only (``seen``: the group where each flavor
    first appeared, updated), and each of its resources' quotas."""
    flavor_name = flavor.get("name")
    if isinstance(flavor_name, str):
        first = seen.setdefault(flavor_name, group)
        if first != group:
            yield (
                (*fpath, "name"),
                f'flavor "{flavor_name}" already appears in resourceGroups[{first}]: '
                "each flavor may appear in only one resource group",
            )
    for k, entry in enumerate(_list(flavor.get("resources"))):
        yield from _flavor_resource_issues(_dict(entry), fpath, k, covered, parent)


def _flavor_resource_issues(
    entry: dict[str, Any], fpath: FieldPath, k: int, covered: list[str], parent: _Parent
) -> Iterator[Issue]:
    """The ``k``-th resource's quotas in a flavor: named as coveredResources names it at the
    same position, no amount below zero, and the lending rules."""
    rpath = (*fpath, "resources", k)
    if k < len(covered) and entry.get("name") != covered[k]:
        yield (
            (*rpath, "name"),
            f'must match the name in coveredResources: expected "{covered[k]}" '
            f"(coveredResources[{k}]), got {_short(entry.get('name'))}; Kueue pairs "
            "them by position",
        )
    amounts = {
        f: _quantity(entry.get(f)) for f in ("nominalQuota", "borrowingLimit", "lendingLimit")
    }
    for field_name, amount in amounts.items():
        if amount is not None and amount < 0:
            yield (
                (*rpath, field_name),
                f"must be greater than or equal to 0, got {entry[field_name]}",
            )
    yield from _lending_issues(entry, rpath, amounts, parent)


def _lending_issues(
    entry: dict[str, Any],
    rpath: FieldPath,
    amounts: Mapping[str, Decimal | None],
    parent: _Parent,
) -> Iterator[Issue]:
    """Nothing to lend to or borrow from without a cohort (a parent), and a ClusterQueue
    lends at most its nominal quota."""
    # A ClusterQueue's borrowingLimit without a cohort is the CRD's CEL rule.
    limit_fields = (
        (("borrowingLimit", "borrow from"), ("lendingLimit", "lend to"))
        if parent.is_cohort
        else (("lendingLimit", "lend to"),)
    )
    for field_name, action in limit_fields:
        if entry.get(field_name) is not None and not parent.present:
            yield (
                (*rpath, field_name),
                f"{field_name} must be nil when {parent.word} is empty: spec.{parent.field} "
                f"is not set, so there is no {parent.word} to {action}",
            )
    nominal, lending = amounts["nominalQuota"], amounts["lendingLimit"]
    if not parent.is_cohort and nominal is not None and lending is not None and lending > nominal:
        yield (
            (*rpath, "lendingLimit"),
            f"must be less than or equal to the nominalQuota ({entry['lendingLimit']} > {entry['nominalQuota']})",
        )


def _resource_group_totals_issues(groups: list[dict[str, Any]]) -> Iterator[Issue]:
    total_flavors = sum(len(_list(group.get("flavors"))) for group in groups)
    total_covered = sum(len(_covered_resources(group)) for group in groups)
    if total_flavors > 256:
        yield (
            ("spec", "resourceGroups"),
            f"total number of flavors across all resourceGroups must be <= 256, got {total_flavors}",
        )
    if total_covered > 256:
        yield (
            ("spec", "resourceGroups"),
            f"total number of covered resources across all resourceGroups must be <= 256, got {total_covered}",
        )


def _fair_sharing_issues(spec: dict[str, Any]) -> Iterator[Issue]:
    weight = _quantity(_dict(spec.get("fairSharing")).get("weight"))
    path: FieldPath = ("spec", "fairSharing", "weight")
    if weight is not None and weight < 0:
        yield path, "must be greater than or equal to 0"
    elif weight is not None and 0 < weight <= Decimal("1e-9"):
        yield path, "When not 0, weight must be > 10e-9"


def _cluster_queue_issues(spec: dict[str, Any]) -> Iterator[Issue]:
    yield from _namespace_selector_issues(spec)
    yield from _resource_group_issues(spec, is_cohort=False)
    yield from _fair_sharing_issues(spec)
    flavors = {
        str(_dict(flavor).get("name"))
        for group in _list(spec.get("resourceGroups"))
        for flavor in _list(_dict(group).get("flavors"))
    }
    checks = _list(_dict(spec.get("admissionChecksStrategy")).get("admissionChecks"))
    for i, check in enumerate(checks):
        for j, flavor in enumerate(_list(_dict(check).get("onFlavors"))):
            if isinstance(flavor, str) and flavor not in flavors:
                yield (
                    ("spec", "admissionChecksStrategy", "admissionChecks", i, "onFlavors", j),
                    f"{_short(flavor)} is not a flavor of this ClusterQueue",
                )


def _resource_flavor_issues(spec: dict[str, Any]) -> Iterator[Issue]:
    """Kueue's ResourceFlavor webhook (``ValidateResourceFlavor``): node labels, node taints
    and toleration keys as the core API validates them on Nodes and Pods."""
    for label, label_value in _dict(spec.get("nodeLabels")).items():
        where: FieldPath = ("spec", "nodeLabels", _Key(label))
        for problem in _qualified_name_problems(str(label)):
            yield where, f"invalid label key {_short(label)}: {problem}"
        if isinstance(label_value, str) and (bad := _label_value_problem(label_value)):
            yield where, f"invalid label value {_short(label_value)}: {bad}"
    seen: dict[tuple[str, str], int] = {}
    for i, taint in enumerate(_list(spec.get("nodeTaints"))):
        taint, path = _dict(taint), ("spec", "nodeTaints", i)
        key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
        if isinstance(key, str):
            for problem in _qualified_name_problems(key):
                yield (*path, "key"), f"invalid taint key {_short(key)}: {problem}"
        if isinstance(value, str) and (bad := _label_value_problem(value)):
            yield (*path, "value"), f"invalid taint value {_short(value)}: {bad}"
        if effect == "":
            yield (
                (*path, "effect"),
                "Required value: a taint needs an effect (NoSchedule, PreferNoSchedule or NoExecute)",
            )
        identity = (str(key), str(effect))
        if identity in seen:
            yield (
                path,
                f"Duplicate value: taints must be unique by key and effect pair: key {_short(key)} "
                f"with effect {_short(effect)} is already nodeTaints[{seen[identity]}]",
            )
        else:
            seen[identity] = i
    for i, toleration in enumerate(_list(spec.get("tolerations"))):
        toleration_key = _dict(toleration).get("key")
        if isinstance(toleration_key, str) and toleration_key:
            for problem in _qualified_name_problems(toleration_key):
                yield (
                    ("spec", "tolerations", i, "key"),
                    f"invalid toleration key {_short(toleration_key)}: {problem}",
                )


def _is_integer_resource(name: str) -> bool:
    """Kubernetes' IsIntegerResourceName: object counts and extended resources."""
    if name in (
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
    ):
        return True
    domain = name.split("/", 1)[0] if "/" in name else ""
    return (
        bool(domain) and not domain.endswith("kubernetes.io") and not name.startswith("requests.")
    )


def _volcano_queue_issues(obj: Mapping[str, Any], spec: dict[str, Any]) -> Iterator[Issue]:
    lists: dict[str, tuple[FieldPath, dict[str, Any]]] = {
        "capability": (("spec", "capability"), _dict(spec.get("capability"))),
        "deserved": (("spec", "deserved"), _dict(spec.get("deserved"))),
        "guarantee": (
            ("spec", "guarantee", "resource"),
            _dict(_dict(spec.get("guarantee")).get("resource")),
        ),
    }
    amounts: dict[str, dict[str, Decimal]] = {}
    for label, (path, raw) in lists.items():
        amounts[label] = {}
        for resource, value in raw.items():
            amount = _quantity(value)
            if amount is None:
                continue
            amounts[label][resource] = amount
            if amount < 0:
                yield (*path, _Key(resource)), f"must be greater than or equal to 0, got {value}"
            elif _is_integer_resource(resource) and amount != amount.to_integral_value():
                yield (*path, _Key(resource)), f"must be an integer, got {value}"
    # Volcano v1.15.1 (the CRDs' version): deserved <= capability and guarantee <= deserved,
    # per resource the upper list names; a resource it does not name is unrestricted, and
    # guarantee is not compared with capability (v1.14 counted a missing resource as 0 and
    # checked guarantee <= capability too).
    for lower, upper in (("deserved", "capability"), ("guarantee", "deserved")):
        for resource, amount in amounts[lower].items():
            limit = amounts[upper].get(resource)
            if limit is not None and amount > limit:
                yield (
                    (*lists[lower][0], _Key(resource)),
                    f"{lower} should less equal than {upper}: {resource} {lower} is "
                    f"{lists[lower][1][resource]}, {upper} is {lists[upper][1][resource]}",
                )
    parent = spec.get("parent")
    if parent and parent == _dict(obj.get("metadata")).get("name"):
        yield ("spec", "parent"), "a queue cannot use itself as parent"


def _webhook_issues(group: str, version: str, kind: str, obj: Mapping[str, Any]) -> Iterator[Issue]:
    """Kueue's and Volcano's admission webhooks (Go code, not CEL), and the portal's rules."""
    spec = _dict(obj.get("spec"))
    if group == "kueue.x-k8s.io" and version == PORTAL_KUEUE_VERSION:
        if kind == "ClusterQueue":
            yield from _cluster_queue_issues(spec)
        elif kind == "Cohort":
            yield from _resource_group_issues(spec, is_cohort=True)
            yield from _fair_sharing_issues(spec)
        elif kind == "LocalQueue":
            if not spec.get("clusterQueue"):
                yield (
                    ("spec", "clusterQueue"),
                    "must be set: a LocalQueue submits its workloads to this ClusterQueue, and "
                    "the field cannot be changed later",
                )
            yield from _fair_sharing_issues(spec)
        elif kind == "ResourceFlavor":
            yield from _resource_flavor_issues(spec)
    elif group == "scheduling.volcano.sh" and kind == "Queue":
        yield from _volcano_queue_issues(obj, spec)


def _core_rule_issues(kind: str, obj: Mapping[str, Any]) -> Iterator[Issue]:
    if kind == "PriorityClass":
        value = obj.get("value")
        name = str(_dict(obj.get("metadata")).get("name", ""))
        if (
            isinstance(value, int)
            and value > _HIGHEST_USER_PRIORITY
            and not name.startswith("system-")
        ):
            yield (
                ("value",),
                f"must be at most {_HIGHEST_USER_PRIORITY} for a user-defined PriorityClass, got {value}",
            )


# --------------------------------------------------------------------------- entry points


def _describe(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) and obj.get("kind") else "<no kind>"
    metadata = _dict(obj.get("metadata"))
    name = (
        metadata.get("name")
        if isinstance(metadata.get("name"), str) and metadata.get("name")
        else "<no name>"
    )
    namespace = metadata.get("namespace")
    return (
        f"{kind} {namespace}/{name}"
        if isinstance(namespace, str) and namespace
        else f"{kind} {name}"
    )


def _shape_issues(data: Any, path: FieldPath, ancestors: set[int]) -> Iterator[Issue]:
    """Keys JSON cannot carry, and cycles (a YAML alias inside itself) JSON cannot encode."""
    if not isinstance(data, dict | list):
        return
    if id(data) in ancestors:
        yield path, "contains itself (a YAML alias cycle): it cannot be sent as JSON"
        return
    ancestors.add(id(data))
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                yield (*path, str(key)), f"the key {key!r} is not a string (JSON keys are strings)"
            else:
                yield from _shape_issues(value, (*path, key), ancestors)
    else:
        for index, item in enumerate(data):
            yield from _shape_issues(item, (*path, index), ancestors)
    ancestors.discard(id(data))


def _issues(
    obj: Mapping[str, Any], kubernetes_version: str, old: Mapping[str, Any] | None = None
) -> Iterator[Issue]:
    schema_version = core_schema_version(kubernetes_version)
    if shape := list(_shape_issues(obj, (), set())):
        yield from shape
        return
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not api_version:
        yield ("apiVersion",), "required field is missing"
    if not isinstance(kind, str) or not kind:
        yield ("kind",), "required field is missing"
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        if not _dict(obj.get("metadata")).get("name"):
            yield ("metadata", "name"), "required field is missing"
        return
    group, version = _split_api_version(api_version)
    crd_groups = {known_group for known_group, _ in _crd_index()}
    if group in crd_groups:
        yield from _crd_issues(obj, group, version, kind, schema_version, old)
        return
    validator = _core_validator(schema_version, api_version, kind)
    note = _version_note(kubernetes_version, schema_version)
    if validator is None:
        yield (
            (),
            f"no schema for kind {kind} in {api_version} (Kubernetes {schema_version}): not a "
            f"built-in kind, and quotas/kube/crds has no CRD for it{note}",
        )
        yield from _metadata_issues(obj, kind, None)
        return
    for error in validator.iter_errors(obj):
        yield from _schema_issues(error, kind, note)
    yield from _metadata_issues(obj, kind, kind not in _CLUSTER_SCOPED_BUILTINS)
    yield from _core_rule_issues(kind, obj)


def _crd_issues(
    obj: Mapping[str, Any],
    group: str,
    version: str,
    kind: str,
    schema_version: str,
    old: Mapping[str, Any] | None = None,
) -> Iterator[Issue]:
    crd = find_crd(group, kind)
    if crd is None:
        kinds = sorted(
            known_kind for known_group, known_kind in _crd_index() if known_group == group
        )
        yield ("kind",), f"{kind} is not a {group} kind (known: {', '.join(kinds)})"
        yield from _metadata_issues(obj, kind, None)
        return
    versions = {entry["name"]: entry for entry in crd["spec"]["versions"]}
    served = [name for name, entry in versions.items() if entry.get("served")]
    entry = versions.get(version)
    if entry is None or not entry.get("served"):
        yield (
            ("apiVersion",),
            f"{group}/{version} is not served by the {kind} CRD (served: {', '.join(served)}); "
            f"the portal writes {group}/{_portal_version(crd)}",
        )
        yield from _metadata_issues(obj, kind, crd["spec"]["scope"] == "Namespaced")
        return
    if entry.get("deprecated"):
        warning = entry.get("deprecationWarning") or f"{group}/{version} {kind} is deprecated"
        yield (
            ("apiVersion",),
            f'{group}/{version} is deprecated ("{warning}"); the portal writes '
            f"{group}/{_portal_version(crd)} only",
        )
    raw_schema = entry["schema"]["openAPIV3Schema"]
    pruned = _drop_nulls(dict(obj), raw_schema)
    blocking = False
    for error in _crd_validator(group, version, kind).iter_errors(pruned):
        blocking = blocking or _is_type_error(error)
        yield from _schema_issues(error, kind)
    metadata = pruned.get("metadata")
    if isinstance(metadata, dict):
        for error in _object_meta_validator(schema_version).iter_errors(metadata):
            for path, reason in _schema_issues(error, kind):
                yield ("metadata", *path), reason
    yield from _metadata_issues(pruned, kind, crd["spec"]["scope"] == "Namespaced")
    if blocking:
        # As the API server does: CEL rules do not run on values of the wrong type.
        yield (
            (),
            "some validation rules were not checked because the object was invalid; correct "
            "the existing errors to complete validation",
        )
    else:
        old_pruned = _drop_nulls(dict(old), raw_schema) if isinstance(old, Mapping) else None
        for violation in check_crd_rules(crd, version, pruned, old_pruned):
            yield _violation_issue(violation)
    yield from _webhook_issues(group, version, kind, pruned)


def _is_type_error(error: Any) -> bool:
    schema = error.schema if isinstance(error.schema, dict) else {}
    return error.validator == "type" or (
        error.validator == "anyOf" and bool(schema.get("x-kubernetes-int-or-string"))
    )


def _violation_issue(violation: Violation) -> Issue:
    """A CEL rule's failure as the API server words it: ``Invalid value: "object": message``."""
    return tuple(violation.path), violation.detail


def _portal_version(crd: Mapping[str, Any]) -> str:
    versions = crd["spec"]["versions"]
    storage = next((v["name"] for v in versions if v.get("storage")), versions[-1]["name"])
    return str(storage)


def validate_object(
    obj: Mapping[str, Any],
    *,
    kubernetes_version: str = "1.33",
    old: Mapping[str, Any] | None = None,
) -> list[str]:
    """Every problem with one object, as ``"Kind namespace/name: field.path: reason"`` lines;
    [] when the API server and the webhooks would accept it and nothing would be lost.

    With ``old`` (the stored object) the check is of an update: CRD transition rules
    (``oldSelf``) are checked against it, and a rule that fails on a value left unchanged is
    dropped, as the API server's validation ratcheting does."""
    if not isinstance(obj, Mapping):
        return [f"<not an object>: expected a mapping, got {type(obj).__name__}"]
    obj = obj if isinstance(obj, dict) else dict(obj)
    return _lines(_describe(obj), _issues(obj, kubernetes_version, old))


def _lines(described: str, issues: Iterable[Issue]) -> list[str]:
    messages: list[str] = []
    for path, reason in issues:
        text = _join(path)
        message = f"{described}: {text}: {reason}" if text else f"{described}: {reason}"
        if message not in messages:
            messages.append(message)
    return messages


def transition_issues(obj: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """The CRD transition rules (those using ``oldSelf``) that updating ``old`` to ``obj``
    breaks, as validate_object lines; [] for a kind without a CRD here or a version not served.

    For a CRD with a status subresource the update cannot change ``status`` (the API server
    keeps the stored one), so the rules see ``old``'s status in ``obj`` too."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return []
    group, version = _split_api_version(api_version)
    crd = find_crd(group, kind)
    entry = (
        next((v for v in crd["spec"]["versions"] if v["name"] == version), None) if crd else None
    )
    if crd is None or entry is None or not entry.get("served"):
        return []
    raw_schema = entry["schema"]["openAPIV3Schema"]
    new, stored = _drop_nulls(dict(obj), raw_schema), _drop_nulls(dict(old), raw_schema)
    if "status" in (entry.get("subresources") or {}):
        new.pop("status", None)
        if "status" in stored:
            new["status"] = stored["status"]
    violations = check_crd_rules(crd, version, new, stored, transition_only=True)
    return _lines(_describe(obj), (_violation_issue(v) for v in violations))


# The version of the portal's own rules here (webhook rules, quantities, names): part of the
# validation memo's key beside the schemas and CRDs. Raise it when a rule changes.
RULES_VERSION = "1"


@functools.lru_cache(maxsize=64)
def _file_digest(path: Path, mtime_ns: int, size: int) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def rules_fingerprint(kubernetes_version: str) -> str:
    """What an object's validation depends on besides the object: the Kubernetes schema
    version used, the kubernetes-validate package, the CRD files (their content) and the
    portal's rules' version. A memo of objects that passed keys on it, so a changed CRD or
    schema validates everything again."""
    parts = [RULES_VERSION, core_schema_version(kubernetes_version), _package_version()]
    for (group, kind), path in sorted(_crd_index().items()):
        stat = path.stat()
        parts.append(f"{group}/{kind}={_file_digest(path, stat.st_mtime_ns, stat.st_size)}")
    return "|".join(parts)


@functools.cache
def _package_version() -> str:
    try:
        return importlib.metadata.version("kubernetes-validate")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - it is a dependency
        return str(_SCHEMA_ROOT)


def validate_objects(
    objs: Iterable[Mapping[str, Any]],
    *,
    kubernetes_version: str = "1.33",
    memo: ValidationMemo | None = None,
    digests: Callable[[Any], bytes] | None = None,
) -> list[str]:
    """``validate_object`` for each object, plus one error per object repeated in the batch.

    With a ``memo`` (``quotas.kube.memo.ValidationMemo``), an object whose digest (from
    ``digests``, else computed) passed before under the same ``rules_fingerprint`` is not
    checked again; one that passes now is remembered. Failures are never remembered."""
    messages: list[str] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    context = rules_fingerprint(kubernetes_version) if memo is not None else ""
    digest_of = digests or object_digest
    for position, obj in enumerate(objs):
        if memo is None or not isinstance(obj, Mapping):
            messages.extend(validate_object(obj, kubernetes_version=kubernetes_version))
        else:
            digest = digest_of(obj)
            if not memo.passed(context, digest):
                problems = validate_object(obj, kubernetes_version=kubernetes_version)
                if problems:
                    messages.extend(problems)
                else:
                    memo.remember(context, digest)
        if not isinstance(obj, Mapping):
            continue
        metadata = _dict(obj.get("metadata"))
        group = _split_api_version(str(obj.get("apiVersion", "")))[0]
        identity = (
            group,
            str(obj.get("kind")),
            str(metadata.get("namespace") or ""),
            str(metadata.get("name")),
        )
        if identity in seen:
            messages.append(
                f"{_describe(obj)}: duplicate object: objects {seen[identity]} and {position} "
                "of this batch have the same kind and name; the second would overwrite the first"
            )
        else:
            seen[identity] = position
    return messages
