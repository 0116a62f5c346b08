"""What the REST verbs do to objects, without HTTP: server-set metadata, resourceVersion
preconditions, generation, status subresources, CRD defaults, validation, field ownership,
namespace cascade and finalizers."""

from __future__ import annotations

import base64
import binascii
import copy
import inspect
import json
import logging
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

from devcluster import managed, patches, rbac
from devcluster.admission import Admission, Attributes
from devcluster.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    qualified,
)
from devcluster.resources import Registry, ResourceType
from devcluster.selectors import labels_match, parse_field_selector, parse_label_selector
from devcluster.store import Store

logger = logging.getLogger("devcluster")

# A validator may also take ``old=`` (the stored object, on updates) for transition rules. It
# reads the objects it is given and must not change them (they share values with the store).
Validator = Callable[[dict[str, Any]], list[str]]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
# Metadata only the server sets: dropped from a create, taken from the stored object on a write.
SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# Fields a real server refuses to change: (group, kind) -> [(path, message)].
IMMUTABLE_FIELDS: dict[tuple[str, str], list[tuple[tuple[str, ...], str]]] = {
    ("scheduling.k8s.io", "PriorityClass"): [
        (("value",), "Forbidden: may not be changed in an update."),
        (("preemptionPolicy",), "Invalid value: field is immutable"),
    ],
    ("rbac.authorization.k8s.io", "RoleBinding"): [
        (("roleRef",), "Invalid value: cannot change roleRef")
    ],
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): [
        (("roleRef",), "Invalid value: cannot change roleRef")
    ],
    ("kueue.x-k8s.io", "LocalQueue"): [
        (("spec", "clusterQueue"), "Invalid value: field is immutable")
    ],
}
_MATCHING_CACHE_SIZE = 64
_FIELD_PATH = re.compile(r"^[A-Za-z_$][\w$-]*(?:\.[\w$-]+|\[[^\]]*\])*$")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quotas_validator(kubernetes_version: str) -> Validator:
    """The portal's own validation (``quotas.kube.validate``), imported on first use so that
    the stand-in starts without it (and without Django)."""
    warned = False

    def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
        nonlocal warned
        try:
            # Imported here: the stand-in must start without it (and without Django).
            from quotas.kube.validate import validate_object
        except ModuleNotFoundError as error:
            if error.name not in ("quotas", "quotas.kube", "quotas.kube.validate"):
                raise
            if not warned:
                logger.warning("devcluster: %s; objects are NOT validated", error)
                warned = True
            return []
        return list(validate_object(obj, kubernetes_version=kubernetes_version, old=old))

    return validate


def accept_everything(obj: dict[str, Any]) -> list[str]:
    """A validator for tests that exercise the API rather than the objects."""
    return []


def apply_schema_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Structural defaulting of a CRD schema, as the API server does on every write: a missing
    property with a ``default`` gets it, in every object present (list items included)."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, child_schema in properties.items():
            if key not in value and "default" in child_schema:
                value[key] = copy.deepcopy(child_schema["default"])
            if key in value:
                apply_schema_defaults(value[key], child_schema)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key, child in value.items():
                if key not in properties:
                    apply_schema_defaults(child, additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_schema_defaults(item, schema["items"])


@dataclass(frozen=True)
class Target:
    """What a request's URL names."""

    resource_type: ResourceType
    version: str
    namespace: str | None  # None for cluster-scoped kinds and all-namespace lists
    name: str | None
    subresource: str = ""  # "" or "status"

    @property
    def api_version(self) -> str:
        return self.resource_type.api_version(self.version)


class Objects:
    """The object semantics of one stand-in, over its store."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        validator: Validator,
        crds: list[dict[str, Any]],
    ) -> None:
        self.registry = registry
        self.store = store
        self.validator = validator
        self.crds = crds
        self.admission = Admission(registry, store)
        self._validator_takes_old = "old" in inspect.signature(validator).parameters
        # LIST selections, valid while store.changes is what it was (see _matching).
        self._matching_cache: dict[
            tuple[str, str | None, str | None, str | None], tuple[list[dict[str, Any]], list[str]]
        ] = {}
        self._matching_at = -1
        self._aggregating = False
        store.listeners.append(self._cluster_roles_changed)

    # Seeding ---------------------------------------------------------------------------------

    def seed(self) -> None:
        """Default namespaces (if missing) and the CRDs of ``--crds`` (always from the files),
        as a fresh cluster with Kueue and Volcano installed has them."""
        namespaces = self._type("namespaces")
        for name in DEFAULT_NAMESPACES:
            if self.store.get(namespaces.key, "", name) is None:
                obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                self._store_new(namespaces, self._prepare_create(namespaces, obj, None))
        self._aggregating = True  # once at the end, not once a role
        try:
            for seeded in rbac.bootstrap_objects():
                resource_type = self._type(
                    rbac.CLUSTER_ROLES
                    if seeded["kind"] == "ClusterRole"
                    else rbac.CLUSTER_ROLE_BINDINGS
                )
                if self.store.get(resource_type.key, "", seeded["metadata"]["name"]) is None:
                    created = self._prepare_create(resource_type, seeded, None)
                    self._store_new(resource_type, created)
        finally:
            self._aggregating = False
        self._aggregate_cluster_roles()
        crd_type = self._type(CRD_KEY)
        for stale in self.store.list(crd_type.key):
            self.store.delete(crd_type.key, "", stale["metadata"]["name"])
        for crd in self.crds:
            obj = copy.deepcopy(crd)
            obj["status"] = {
                "acceptedNames": crd["spec"]["names"],
                "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
                "conditions": [
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
                ],
            }
            self._store_new(crd_type, self._prepare_create(crd_type, obj, None))

    def reset(self) -> None:
        self.store.wipe()
        self.seed()

    def _cluster_roles_changed(self, type_key: str, event: str, obj: dict[str, Any]) -> None:
        """The ClusterRole aggregation controller: a ClusterRole changed, aggregated roles follow."""
        if type_key == rbac.CLUSTER_ROLES and not self._aggregating:
            self._aggregate_cluster_roles()

    def _aggregate_cluster_roles(self) -> None:
        self._aggregating = True
        try:
            rbac.aggregate_cluster_roles(self.store, self.store.next_resource_version)
        finally:
            self._aggregating = False

    def _type(self, key: str) -> ResourceType:
        resource_type = self.registry.by_key(key)
        assert resource_type is not None, key
        return resource_type

    # Reads -----------------------------------------------------------------------------------

    def present(self, target: Target, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as served at the request's version (stored once, without conversion)."""
        return {**obj, "apiVersion": target.api_version}

    def existing(self, target: Target) -> dict[str, Any]:
        assert target.name is not None
        obj = self.store.get(target.resource_type.key, target.namespace or "", target.name)
        if obj is None:
            raise not_found(target.resource_type.plural, target.resource_type.group, target.name)
        return obj

    def get(self, target: Target) -> dict[str, Any]:
        return self.present(target, self.existing(target))

    def select(
        self,
        target: Target,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Matching objects in (namespace, name) order and the list metadata. A ``continue``
        token resumes after the last object returned; unlike etcd it is not a snapshot."""
        objects, list_meta = self._page(
            target, label_selector, field_selector, limit, continue_token
        )
        return [self.present(target, obj) for obj in objects], list_meta

    def select_encoded(
        self,
        target: Target,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[list[bytes], dict[str, Any]]:
        """``select`` with each object as its compact JSON at the request's version: the bytes
        kept by the store when the object is stored at that version (the usual case)."""
        objects, list_meta = self._page(
            target, label_selector, field_selector, limit, continue_token
        )
        api_version, encoded = target.api_version, self.store.encoded
        return [
            encoded(obj)
            if obj.get("apiVersion") == api_version
            else json.dumps(self.present(target, obj), separators=(",", ":")).encode()
            for obj in objects
        ], list_meta

    def encoded_if_stored(self, target: Target, body: Any) -> bytes | None:
        """The kept JSON of the stored object when ``body`` is that object as served (what
        ``present`` makes of it: the same keys in the same order, the very same values, and
        the stored apiVersion); None for anything else (a Status, a dry run, another
        version)."""
        metadata = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            return None
        stored = self.store.get(
            target.resource_type.key, metadata.get("namespace", ""), metadata["name"]
        )
        if (
            stored is None
            or stored.get("apiVersion") != body.get("apiVersion")
            or list(stored) != list(body)
            or any(body[key] is not value for key, value in stored.items() if key != "apiVersion")
        ):
            return None
        return self.store.encoded(stored)

    def _page(
        self,
        target: Target,
        label_selector: str | None,
        field_selector: str | None,
        limit: int,
        continue_token: str | None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        objects, sort_keys = self._matching(target, label_selector, field_selector)
        list_meta: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        start_after = _decode_continue(continue_token)
        if start_after is not None:
            objects = [
                obj for obj, key in zip(objects, sort_keys, strict=True) if key > start_after
            ]
        if limit and len(objects) > limit:
            list_meta["remainingItemCount"] = len(objects) - limit
            objects = objects[:limit]
            list_meta["continue"] = _encode_continue(_sort_key(objects[-1]))
        return objects, list_meta

    def _matching(
        self, target: Target, label_selector: str | None, field_selector: str | None
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The objects a LIST's selectors match, with their continue keys. Kept until the store
        changes: the pages of one LIST (and the LISTs of a pass that writes nothing) filter
        the type's objects once, not once a page."""
        requirements = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, target.resource_type.kind)
        if self._matching_at != self.store.changes:
            self._matching_cache.clear()
            self._matching_at = self.store.changes
        key = (target.resource_type.key, target.namespace, label_selector, field_selector)
        found = self._matching_cache.get(key)
        if found is None:
            objects = [
                obj
                for obj in self.store.list(target.resource_type.key, target.namespace)
                if labels_match(requirements, obj) and fields(obj)
            ]
            found = (objects, [_sort_key(obj) for obj in objects])
            if len(self._matching_cache) >= _MATCHING_CACHE_SIZE:
                self._matching_cache.clear()
            self._matching_cache[key] = found
        return found

    # Writes ----------------------------------------------------------------------------------

    def create(
        self, target: Target, body: dict[str, Any], *, manager: str, dry_run: bool
    ) -> dict[str, Any]:
        resource_type = target.resource_type
        self._check_identity(target, body, creating=True)
        obj = self._prepare_create(resource_type, body, manager)
        name = obj["metadata"]["name"]
        if self.store.get(resource_type.key, target.namespace or "", name) is not None:
            raise already_exists(resource_type.plural, resource_type.group, name)
        self._admit(self._attributes("CREATE", target, obj, None, dry_run))
        if not dry_run:
            self._store_new(resource_type, obj)
        return self.present(target, obj)

    def update(
        self, target: Target, body: dict[str, Any], *, manager: str, dry_run: bool
    ) -> dict[str, Any]:
        resource_type = target.resource_type
        self._check_identity(target, body, creating=False)
        current = self.existing(target)
        if not body["metadata"].get("resourceVersion") and resource_type.is_custom:
            # Custom resources do not allow unconditional updates.
            raise invalid(
                resource_type.kind,
                resource_type.group,
                target.name or "",
                [_required("metadata.resourceVersion", "must be specified for an update")],
            )
        return self._commit(target, current, body, manager=manager, dry_run=dry_run)

    def patch(
        self, target: Target, media_type: str, body: Any, *, manager: str, dry_run: bool
    ) -> dict[str, Any]:
        current = self.existing(target)
        base = self.present(target, copy.deepcopy(current))
        if media_type == MERGE_PATCH:
            patched = patches.merge_patch(base, body)
        elif media_type == STRATEGIC_PATCH:
            if target.resource_type.is_custom:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml",
                )
            patched = patches.strategic_merge_patch(base, body)
        elif media_type == JSON_PATCH:
            patched = patches.json_patch(base, body)
        else:
            raise ApiError(415, f"unsupported patch type {media_type!r}")
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        self._check_identity(target, patched, creating=False)
        return self._commit(target, current, patched, manager=manager, dry_run=dry_run)

    def apply(
        self, target: Target, body: dict[str, Any], *, manager: str, force: bool, dry_run: bool
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply (see ``devcluster.managed``); creates when missing. Returns the
        object and whether it was created."""
        resource_type = target.resource_type
        if not body.get("apiVersion") or not body.get("kind"):
            raise bad_request("apiVersion and kind must be set in an apply request")
        self._check_identity(target, body, creating=False)
        # What the endpoint takes: status only through /status, and /status takes only status.
        if target.subresource:
            applied = {k: body[k] for k in ("apiVersion", "kind", "metadata")}
            applied["status"] = body.get("status") or {}
        elif resource_type.has_status:
            applied = {k: v for k, v in body.items() if k != "status"}
        else:
            applied = body
        assert target.name is not None
        current = self.store.get(resource_type.key, target.namespace or "", target.name)
        if current is not None:
            result = managed.apply_fields(
                self.present(target, copy.deepcopy(current)),
                applied,
                manager=manager,
                force=force,
                api_version=target.api_version,
                subresource=target.subresource,
                now=now_rfc3339(),
            )
            return self._commit(
                target, current, result, manager=manager, dry_run=dry_run, operation="Apply"
            ), False
        if target.subresource:
            raise not_found(resource_type.plural, resource_type.group, target.name)
        if (
            target.namespace is not None
            and self.store.get("namespaces", "", target.namespace) is None
        ):
            raise not_found("namespaces", "", target.namespace)
        metadata = body["metadata"]
        skeleton = {
            "apiVersion": target.api_version,
            "kind": resource_type.kind,
            "metadata": {k: metadata[k] for k in ("name", "namespace") if k in metadata},
        }
        result = managed.apply_fields(
            skeleton,
            applied,
            manager=manager,
            force=force,
            api_version=target.api_version,
            subresource="",
            now=now_rfc3339(),
        )
        entries = result["metadata"].pop("managedFields", None)
        obj = self._prepare_create(resource_type, result, None)
        if entries:
            obj["metadata"]["managedFields"] = entries
        _prune_managed(obj)
        self._admit(self._attributes("CREATE", target, obj, None, dry_run))
        if not dry_run:
            self._store_new(resource_type, obj)
        return self.present(target, obj), True

    def delete(self, target: Target, options: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        """The response body: the object for custom resources, namespaces and objects kept by
        their finalizers, otherwise a Success Status."""
        resource_type = target.resource_type
        current = self.existing(target)
        name, metadata = current["metadata"]["name"], current["metadata"]
        preconditions = options.get("preconditions") or {}
        for key in ("uid", "resourceVersion"):
            if preconditions.get(key) and preconditions[key] != metadata[key]:
                label = "UID" if key == "uid" else "ResourceVersion"
                raise conflict(
                    resource_type.plural,
                    resource_type.group,
                    name,
                    f"Precondition failed: {label} in precondition: {preconditions[key]}, "
                    f"{label} in object meta: {metadata[key]}",
                )
        if resource_type.key == "namespaces" and name in UNDELETABLE_NAMESPACES:
            raise ApiError(
                403,
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                details={"name": name, "kind": "namespaces"},
            )
        self.admission.validate(self._attributes("DELETE", target, None, current, dry_run))
        removed, answered_with_object = self._remove(target, current, dry_run)
        if answered_with_object or resource_type.is_custom:
            return self.present(target, removed)
        details: dict[str, Any] = {
            "name": name,
            "kind": resource_type.plural,
            "uid": metadata["uid"],
        }
        if resource_type.group:
            details["group"] = resource_type.group
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def delete_collection(
        self,
        target: Target,
        *,
        label_selector: str | None,
        field_selector: str | None,
        dry_run: bool,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        items, list_meta = self.select(
            target, label_selector=label_selector, field_selector=field_selector
        )
        removed = []
        for obj in items:
            stored = self.existing(
                replace(
                    target,
                    name=obj["metadata"]["name"],
                    namespace=obj["metadata"].get("namespace") or None,
                )
            )
            self.admission.validate(self._attributes("DELETE", target, None, stored, dry_run))
            removed.append(self._remove(target, stored, dry_run)[0])
        return [self.present(target, obj) for obj in removed], list_meta

    # Internals -------------------------------------------------------------------------------

    def _check_identity(self, target: Target, obj: dict[str, Any], *, creating: bool) -> None:
        """apiVersion, kind, name and namespace of the body against the URL (filled in when
        missing)."""
        resource_type = target.resource_type
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and api_version != target.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({target.api_version})"
            )
        if kind is not None and kind != resource_type.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind "
                f"({resource_type.kind})"
            )
        obj["apiVersion"], obj["kind"] = target.api_version, resource_type.kind
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise bad_request("metadata must be an object")
        if target.name is not None:
            if metadata.get("name") not in (None, "", target.name):
                raise bad_request(
                    f"the name of the object ({metadata['name']}) does not match the name on the "
                    f"URL ({target.name})"
                )
            metadata["name"] = target.name
        if not resource_type.namespaced:
            metadata.pop("namespace", None)
            return
        if metadata.get("namespace") not in (None, "", target.namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        if target.namespace is None:
            raise ApiError(404, "the server could not find the requested resource")
        metadata["namespace"] = target.namespace
        if creating and self.store.get("namespaces", "", target.namespace) is None:
            raise not_found("namespaces", "", target.namespace)

    def _prepare_create(
        self, resource_type: ResourceType, obj: dict[str, Any], manager: str | None
    ) -> dict[str, Any]:
        metadata = obj["metadata"]
        if metadata.get("resourceVersion"):
            raise ApiError(
                500,
                "Internal error occurred: resourceVersion should not be set on objects to be "
                "created",
            )
        if not metadata.get("name"):
            if not metadata.get("generateName"):
                raise invalid(
                    resource_type.kind,
                    resource_type.group,
                    "",
                    [_required("metadata.name", "name or generateName is required")],
                )
            suffix = "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
            metadata["name"] = f"{metadata['generateName']}{suffix}"
        for key in (*SERVER_METADATA, "managedFields"):
            metadata.pop(key, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = now_rfc3339()
        if resource_type.has_generation:
            metadata["generation"] = 1
        if resource_type.has_status and resource_type.is_custom:
            obj.pop("status", None)  # written through /status only
        self._server_fields(resource_type, obj)
        if manager is not None:
            managed.record_update(
                None,
                obj,
                manager=manager,
                api_version=obj["apiVersion"],
                subresource="",
                now=metadata["creationTimestamp"],
            )
        return obj

    def _server_fields(self, resource_type: ResourceType, obj: dict[str, Any]) -> None:
        """What the API server and the control plane's controllers set on every write."""
        metadata = obj["metadata"]
        if resource_type.is_custom:
            version = str(obj.get("apiVersion", "")).rsplit("/", 1)[-1]
            apply_schema_defaults(obj, resource_type.schemas.get(version) or {})
        if resource_type.key == "namespaces":
            metadata.setdefault("labels", {})[NAMESPACE_NAME_LABEL] = metadata["name"]
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            terminating = bool(metadata.get("deletionTimestamp"))
            obj["status"] = {"phase": "Terminating" if terminating else "Active"}
        elif resource_type.key == "resourcequotas":
            # The quota controller's view: hard mirrors spec.hard, used what the namespace holds.
            obj["status"] = self.admission.quota_status(obj)
        elif resource_type.key == "pods":
            obj.setdefault("status", {}).setdefault("phase", "Pending")

    def _attributes(
        self,
        operation: str,
        target: Target,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        dry_run: bool,
    ) -> Attributes:
        subject = obj if obj is not None else old
        assert subject is not None
        metadata = subject["metadata"]
        return Attributes(
            operation=operation,
            resource_type=target.resource_type,
            version=target.version,
            namespace=metadata.get("namespace", ""),
            name=metadata.get("name", ""),
            subresource=target.subresource,
            obj=obj,
            old=old,
            dry_run=dry_run,
        )

    def _admit(self, attributes: Attributes) -> None:
        """Mutating admission, the object's validation, validating admission (creates)."""
        assert attributes.obj is not None
        self.admission.mutate(attributes)
        self._validate(attributes.resource_type, attributes.obj)
        self.admission.validate(attributes)

    def _store_new(self, resource_type: ResourceType, obj: dict[str, Any]) -> None:
        obj["apiVersion"] = resource_type.api_version(resource_type.storage_version)
        obj["metadata"]["resourceVersion"] = self.store.next_resource_version()
        self.store.put(resource_type.key, obj, created=True)

    def _validate(
        self, resource_type: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        """The name, then the validator (with the stored object on updates, so that CRD
        transition rules run: 422 naming the rule's message, as the API server)."""
        name = obj["metadata"]["name"]
        if resource_type.key == "namespaces":
            name_ok = bool(_LABEL.match(name)) and len(name) <= 63
        elif resource_type.group == "rbac.authorization.k8s.io":
            name_ok = "/" not in name and "%" not in name and name not in (".", "..")
        else:
            name_ok = bool(_SUBDOMAIN.match(name)) and len(name) <= 253
        causes: list[dict[str, str]] = []
        if not name_ok:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": "metadata.name",
                    "message": f'Invalid value: "{name}": a lowercase RFC 1123 name must consist '
                    "of lower case alphanumeric characters, '-' or '.'",
                }
            )
        elif resource_type.group == "" and resource_type.kind == "Pod":
            causes = _ephemeral_container_errors(obj)
        if not causes and name_ok and resource_type.validated:
            candidate = _without_server_metadata(obj)
            if old is not None and self._validator_takes_old:
                stored = _without_server_metadata(old)
                stored["apiVersion"] = candidate["apiVersion"]  # one stored version, served as any
                takes_old = cast(Callable[..., list[str]], self.validator)
                messages = takes_old(candidate, old=stored)
            else:
                messages = self.validator(candidate)
            causes = [_cause(message, candidate) for message in messages]
        if causes:
            raise invalid(resource_type.kind, resource_type.group, name, causes)

    def _check_immutable(
        self, resource_type: ResourceType, current: dict[str, Any], new: dict[str, Any]
    ) -> None:
        causes = [
            {"reason": "FieldValueInvalid", "field": ".".join(path), "message": message}
            for path, message in IMMUTABLE_FIELDS.get((resource_type.group, resource_type.kind), [])
            if managed.value_at(current, path) != managed.value_at(new, path)
        ]
        if causes:
            name = current["metadata"]["name"]
            raise invalid(resource_type.kind, resource_type.group, name, causes)

    def _commit(
        self,
        target: Target,
        current: dict[str, Any],
        candidate: dict[str, Any],
        *,
        manager: str,
        dry_run: bool,
        operation: str = "Update",
    ) -> dict[str, Any]:
        """The common end of update, patch and apply: preconditions, server-owned fields,
        generation, field ownership, validation, then store unless nothing changed."""
        resource_type = target.resource_type
        current_meta, metadata = current["metadata"], candidate["metadata"]
        name = current_meta["name"]
        if metadata.get("resourceVersion") not in (None, "", current_meta["resourceVersion"]):
            raise conflict(
                resource_type.plural,
                resource_type.group,
                name,
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        if metadata.get("uid") not in (None, "", current_meta["uid"]):
            raise conflict(
                resource_type.plural,
                resource_type.group,
                name,
                f"Precondition failed: UID in precondition: {metadata['uid']}, UID in object "
                f"meta: {current_meta['uid']}",
            )
        if target.subresource == "status":
            new = copy.deepcopy(current)  # /status changes status only
            new["apiVersion"] = target.api_version
            if "status" in candidate:
                new["status"] = candidate["status"]
            else:
                new.pop("status", None)
            if operation == "Apply":
                new["metadata"]["managedFields"] = metadata.get("managedFields", [])
        else:
            new = candidate
            for key in SERVER_METADATA:
                if key in current_meta:
                    metadata[key] = current_meta[key]
                else:
                    metadata.pop(key, None)
            if resource_type.has_status:  # the main resource ignores status
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            if operation != "Apply":
                # A client's managedFields are ignored, except the documented [{}] reset.
                if metadata.get("managedFields") == [{}]:
                    current = {**current, "metadata": {**current_meta, "managedFields": []}}
                metadata["managedFields"] = current_meta.get("managedFields", [])
        metadata = new["metadata"]
        metadata["resourceVersion"] = current_meta["resourceVersion"]
        self._server_fields(resource_type, new)
        attributes = self._attributes("UPDATE", target, new, current, dry_run)
        self.admission.mutate(attributes)
        if resource_type.has_generation and _spec_of(new) != _spec_of(current):
            metadata["generation"] = int(current_meta.get("generation") or 1) + 1
        if operation == "Apply":
            _prune_managed(new)
        else:
            managed.record_update(
                current,
                new,
                manager=manager,
                api_version=target.api_version,
                subresource=target.subresource,
                now=now_rfc3339(),
            )
        new["apiVersion"] = resource_type.api_version(resource_type.storage_version)
        if _same_ignoring_times(new, current):
            return self.present(target, current)  # a no-op keeps the resourceVersion
        self._check_immutable(resource_type, current, new)
        self._validate(resource_type, new, old=current)
        self.admission.validate(attributes)
        if dry_run:
            return self.present(target, new)
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            self.store.delete(resource_type.key, metadata.get("namespace", ""), name)
        else:
            metadata["resourceVersion"] = self.store.next_resource_version()
            self.store.put(resource_type.key, new, created=False)
        return self.present(target, new)

    def _remove(
        self, target: Target, current: dict[str, Any], dry_run: bool
    ) -> tuple[dict[str, Any], bool]:
        """Delete ``current`` (or mark it, while it has finalizers). Returns the object as it
        is answered and whether a real server answers with the object."""
        resource_type = target.resource_type
        metadata = current["metadata"]
        namespace, name = metadata.get("namespace", ""), metadata["name"]
        if metadata.get("finalizers"):
            if metadata.get("deletionTimestamp"):
                return current, True
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = now_rfc3339()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            if not dry_run:
                marked["metadata"]["resourceVersion"] = self.store.next_resource_version()
                self.store.put(resource_type.key, marked, created=False)
            return marked, True
        if resource_type.key == "namespaces":
            # The namespace controller, at once: what is in it goes, then the namespace.
            terminating = copy.deepcopy(current)
            terminating["metadata"]["deletionTimestamp"] = now_rfc3339()
            terminating["status"] = {"phase": "Terminating"}
            if not dry_run:
                for other in self.registry.types:
                    if other.namespaced:
                        for obj in self.store.list(other.key, name):
                            self.store.delete(other.key, name, obj["metadata"]["name"])
                self.store.delete(resource_type.key, "", name)
            return terminating, True
        if not dry_run:
            self.store.delete(resource_type.key, namespace, name)
        return current, False


# Helpers -----------------------------------------------------------------------------------------


def read_only_error(resource_type: ResourceType) -> ApiError:
    return ApiError(
        405,
        f"{qualified(resource_type.plural, resource_type.group)} are read-only in devcluster "
        "(served from --crds)",
    )


# Fields of an ephemeral container that upstream's allow list (allowedEphemeralContainerFields)
# leaves out: "cannot be set for an Ephemeral Container" when set to anything but empty.
_EPHEMERAL_FORBIDDEN = (
    "ports",
    "resources",
    "resizePolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "restartPolicy",
)


def _ephemeral_container_errors(pod: dict[str, Any]) -> list[dict[str, str]]:
    """``validateEphemeralContainers``' field allow list: 422 ``spec.ephemeralContainers[0].
    resources: Forbidden: cannot be set for an Ephemeral Container``."""
    spec = pod.get("spec")
    containers = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
    causes: list[dict[str, str]] = []
    for index, container in enumerate(containers if isinstance(containers, list) else ()):
        if not isinstance(container, dict):
            continue
        for field_name in _EPHEMERAL_FORBIDDEN:
            if container.get(field_name) not in (None, {}, [], ""):
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": f"spec.ephemeralContainers[{index}].{field_name}",
                        "message": "Forbidden: cannot be set for an Ephemeral Container",
                    }
                )
    return causes


def _required(field: str, message: str) -> dict[str, str]:
    return {"reason": "FieldValueRequired", "field": field, "message": f"Required value: {message}"}


def _prune_managed(obj: dict[str, Any]) -> None:
    """Drop owned paths the object no longer has (status reset, defaults, removals)."""
    entries = managed.read_entries(obj)
    paths = managed.tracked_paths(obj)
    for entry in entries:
        entry.paths &= paths
    managed.write_entries(obj, entries)


def _sort_key(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    return f"{metadata.get('namespace', '')}/{metadata['name']}"


def _encode_continue(after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"v": 1, "start": after}).encode()).decode()


def _decode_continue(token: str | None) -> str | None:
    if not token:
        return None
    try:
        return str(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
    except (ValueError, KeyError, TypeError, binascii.Error) as error:
        raise bad_request("continue key is not valid") from error


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    """What bumps ``generation``: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _same_ignoring_times(new: dict[str, Any], current: dict[str, Any]) -> bool:
    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        metadata = dict(obj["metadata"])
        metadata["managedFields"] = [
            {k: v for k, v in entry.items() if k != "time"}
            for entry in metadata.get("managedFields") or []
        ]
        return {**obj, "metadata": metadata}

    return strip(new) == strip(current)


_NOT_VALIDATED = frozenset((*SERVER_METADATA, "resourceVersion", "managedFields"))


def _without_server_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """What the validator sees: the object without server-set metadata. A shallow copy (a
    deep one was a tenth of an apply's CPU): validators read the object, never change it."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in _NOT_VALIDATED}
    return {**obj, "metadata": metadata}


def _cause(message: str, obj: dict[str, Any]) -> dict[str, str]:
    """A ``details.causes`` entry from a ``quotas.kube.validate`` message,
    ``"Kind namespace/name: field.path: reason"``."""
    metadata = obj.get("metadata") or {}
    namespace, name, kind = metadata.get("namespace"), metadata.get("name"), obj.get("kind")
    described = f"{kind} {namespace}/{name}: " if namespace else f"{kind} {name}: "
    text = message.removeprefix(described)
    field_path, separator, reason = text.partition(": ")
    if separator and _FIELD_PATH.match(field_path):
        return {"reason": "FieldValueInvalid", "field": field_path, "message": reason}
    return {"reason": "FieldValueInvalid", "message": text}
