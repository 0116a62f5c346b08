"""The kinds the stand-in serves: a fixed set of built-in kinds plus the CRDs of ``--crds``."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_VERBS = ("get", "list", "watch")

# Groups whose writes go through the validator (with the core kinds marked below).
VALIDATED_GROUPS = frozenset(
    {
        "kueue.x-k8s.io",
        "scheduling.volcano.sh",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "admissionregistration.k8s.io",
    }
)


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ResourceType:
    """One REST resource (``clusterqueues``), served at one or more versions of its group."""

    group: str
    versions: tuple[str, ...]  # preferred (storage) version first
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = False
    has_generation: bool = False
    read_only: bool = False
    validated: bool = False
    is_custom: bool = False
    create_only: bool = False  # reviews and the like: POST answers, nothing is stored
    deprecated_versions: dict[str, str] = field(default_factory=dict)  # version -> warning
    printer_columns: dict[str, tuple[PrinterColumn, ...]] = field(default_factory=dict)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # version -> openAPIV3Schema

    @property
    def key(self) -> str:
        """Version-independent identity used by the store."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    @property
    def verbs(self) -> tuple[str, ...]:
        if self.create_only:
            return ("create",)
        return READ_VERBS if self.read_only else ALL_VERBS

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


def _core(
    kind: str,
    plural: str,
    namespaced: bool,
    short_names: tuple[str, ...] = (),
    **extra: Any,
) -> ResourceType:
    return ResourceType(
        group="",
        versions=("v1",),
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=short_names,
        **extra,
    )


def _grouped(
    group: str,
    kind: str,
    plural: str,
    namespaced: bool,
    short_names: tuple[str, ...] = (),
    **extra: Any,
) -> ResourceType:
    return ResourceType(
        group=group,
        versions=("v1",),
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=short_names,
        validated=group in VALIDATED_GROUPS,
        **extra,
    )


RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io"
WORKLOADS = ("all",)  # kubectl get all

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core(
        "Namespace",
        "namespaces",
        False,
        ("ns",),
        has_status=True,
        validated=True,
        printer_columns={"v1": (PrinterColumn("Status", "string", ".status.phase"),)},
    ),
    # Cluster-scoped; the portal reads Nodes and patches their labels (MIG through the GPU
    # Operator), and tests create them and play the MIG manager by setting its state label.
    _core(
        "Node",
        "nodes",
        False,
        ("no",),
        has_status=True,
        printer_columns={
            "v1": (PrinterColumn("Version", "string", ".status.nodeInfo.kubeletVersion"),)
        },
    ),
    _core("ResourceQuota", "resourcequotas", True, ("quota",), has_status=True, validated=True),
    _core("LimitRange", "limitranges", True, ("limits",), validated=True),
    _core("ServiceAccount", "serviceaccounts", True, ("sa",), validated=True),
    _core("ConfigMap", "configmaps", True, ("cm",), validated=True),
    _core("Secret", "secrets", True),
    _core("Pod", "pods", True, ("po",), has_status=True, has_generation=True, categories=WORKLOADS),
    _core("PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), has_status=True),
    # Events: core/v1 and events.k8s.io/v1 views of the same events (devcluster.events).
    _core(
        "Event",
        "events",
        True,
        ("ev",),
        printer_columns={
            "v1": (
                PrinterColumn("Type", "string", ".type"),
                PrinterColumn("Reason", "string", ".reason"),
                PrinterColumn("Object", "string", ".involvedObject.name"),
                PrinterColumn("Message", "string", ".message"),
            )
        },
    ),
    _grouped(
        "events.k8s.io",
        "Event",
        "events",
        True,
        ("ev",),
        printer_columns={
            "v1": (
                PrinterColumn("Type", "string", ".type"),
                PrinterColumn("Reason", "string", ".reason"),
                PrinterColumn("Object", "string", ".regarding.name"),
                PrinterColumn("Note", "string", ".note"),
            )
        },
    ),
    _grouped(
        "batch", "Job", "jobs", True, has_status=True, has_generation=True, categories=WORKLOADS
    ),
    _grouped(
        "batch",
        "CronJob",
        "cronjobs",
        True,
        ("cj",),
        has_status=True,
        has_generation=True,
        categories=WORKLOADS,
    ),
    *(
        _grouped(
            "apps",
            kind,
            kind.lower() + "s",
            True,
            (short,),
            has_status=True,
            has_generation=True,
            categories=WORKLOADS,
        )
        for kind, short in (("Deployment", "deploy"), ("StatefulSet", "sts"), ("ReplicaSet", "rs"))
    ),
    _grouped(
        "networking.k8s.io",
        "NetworkPolicy",
        "networkpolicies",
        True,
        ("netpol",),
        has_generation=True,
    ),
    _grouped(RBAC, "Role", "roles", True),
    _grouped(RBAC, "RoleBinding", "rolebindings", True),
    _grouped(RBAC, "ClusterRole", "clusterroles", False),
    _grouped(RBAC, "ClusterRoleBinding", "clusterrolebindings", False),
    _grouped("scheduling.k8s.io", "PriorityClass", "priorityclasses", False, ("pc",)),
    # What a cluster's storage offers (R3): the portal reads them to refuse a tenant the
    # classes its quota does not name. VolumeAttributesClass is v1 from Kubernetes 1.34.
    _grouped("storage.k8s.io", "StorageClass", "storageclasses", False, ("sc",)),
    ResourceType(
        group="storage.k8s.io",
        versions=("v1", "v1beta1"),
        kind="VolumeAttributesClass",
        plural="volumeattributesclasses",
        singular="volumeattributesclass",
        namespaced=False,
        short_names=("vac",),
    ),
    # The portal's admission policies; evaluated on writes by devcluster.policies.
    _grouped(
        ADMISSION,
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        False,
        has_status=True,
        has_generation=True,
        categories=("api-extensions",),
    ),
    _grouped(
        ADMISSION,
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        False,
        has_generation=True,
        categories=("api-extensions",),
    ),
    # Create-only kinds: answered by the server, never stored (devcluster.reviews).
    *(
        ResourceType(
            group=group,
            versions=("v1",),
            kind=kind,
            plural=kind.lower() + "s",
            singular=kind.lower(),
            namespaced=kind == "LocalSubjectAccessReview",
            create_only=True,
        )
        for group, kind in (
            ("authentication.k8s.io", "TokenReview"),
            ("authentication.k8s.io", "SelfSubjectReview"),
            ("authorization.k8s.io", "LocalSubjectAccessReview"),
            ("authorization.k8s.io", "SelfSubjectAccessReview"),
            ("authorization.k8s.io", "SelfSubjectRulesReview"),
            ("authorization.k8s.io", "SubjectAccessReview"),
        )
    ),
    ResourceType(
        group="apiextensions.k8s.io",
        versions=("v1",),
        kind="CustomResourceDefinition",
        plural="customresourcedefinitions",
        singular="customresourcedefinition",
        namespaced=False,
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        has_status=True,
        read_only=True,
    ),
)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser when it is built


def load_crd_documents(directory: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the ``*.yaml`` / ``*.yml`` files of ``directory``."""
    if not directory.is_dir():
        raise FileNotFoundError(f"no CRD directory {directory}")
    paths = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    fingerprint = tuple((str(path), path.stat().st_mtime_ns) for path in paths)
    return copy.deepcopy(_parse_crds(fingerprint))


@functools.cache
def _parse_crds(fingerprint: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    """Parsed once per process and file version: the Kueue CRDs are large."""
    documents: list[dict[str, Any]] = []
    for path, _mtime in fingerprint:
        with open(path, encoding="utf-8") as stream:
            for document in yaml.load_all(stream, Loader=_LOADER):  # CSafeLoader or SafeLoader
                if (
                    isinstance(document, dict)
                    and document.get("kind") == "CustomResourceDefinition"
                ):
                    documents.append(document)
    return documents


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, then higher numbers first."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0)
    major, stability, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stability]
    return (rank, -int(major), -int(minor or 0))


def crd_resource_type(crd: dict[str, Any]) -> ResourceType:
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    storage = [v["name"] for v in served if v.get("storage")]
    # Discovery lists the versions by Kubernetes priority; the stand-in stores at the storage
    # version and that is also the preferred one for the CRDs we carry (v1beta2 > v1beta1).
    ordered = sorted((v["name"] for v in served), key=_version_priority)
    if storage and ordered[0] != storage[0]:
        ordered.remove(storage[0])
        ordered.insert(0, storage[0])
    group = spec["group"]
    return ResourceType(
        group=group,
        versions=tuple(ordered),
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        has_status=any("status" in (v.get("subresources") or {}) for v in served),
        has_generation=True,
        validated=group in VALIDATED_GROUPS,
        is_custom=True,
        deprecated_versions={
            v["name"]: v.get("deprecationWarning")
            or f"{group}/{v['name']} {names['kind']} is deprecated"
            for v in served
            if v.get("deprecated")
        },
        printer_columns={
            v["name"]: tuple(
                PrinterColumn(
                    name=c["name"],
                    type=c.get("type", "string"),
                    json_path=c["jsonPath"],
                    description=c.get("description", ""),
                    priority=int(c.get("priority", 0)),
                )
                for c in v.get("additionalPrinterColumns") or ()
            )
            for v in served
        },
        schemas={v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") or {} for v in served},
    )


class Registry:
    """Looks resource types up by URL coordinates and lists them for discovery."""

    def __init__(self, types: Iterable[ResourceType]) -> None:
        self.types: list[ResourceType] = list(types)
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._by_key: dict[str, ResourceType] = {}
        for resource_type in self.types:
            self._by_key[resource_type.key] = resource_type
            for version in resource_type.versions:
                self._by_path[(resource_type.group, version, resource_type.plural)] = resource_type

    @classmethod
    def with_crds(cls, crds: Iterable[dict[str, Any]]) -> Registry:
        return cls([*BUILTIN_TYPES, *(crd_resource_type(crd) for crd in crds)])

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def by_key(self, key: str) -> ResourceType | None:
        return self._by_key.get(key)

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        for resource_type in self.types:
            if resource_type.group == group and resource_type.kind == kind:
                return resource_type
        return None

    def groups(self) -> list[tuple[str, list[str]]]:
        """(group, versions preferred first) in a stable order, the core group excluded."""
        seen: dict[str, list[str]] = {}
        for resource_type in self.types:
            if not resource_type.group:
                continue
            versions = seen.setdefault(resource_type.group, [])
            for version in resource_type.versions:
                if version not in versions:
                    versions.append(version)
        return [
            (group, sorted(versions, key=lambda v: self._preferred_rank(group, v)))
            for group, versions in seen.items()
        ]

    def _preferred_rank(self, group: str, version: str) -> tuple[int, tuple[int, int, int]]:
        preferred = {t.storage_version for t in self.types if t.group == group}
        return (0 if version in preferred else 1, _version_priority(version))

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self.types if t.group == group and version in t.versions]
