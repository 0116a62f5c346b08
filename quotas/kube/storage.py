"""Storage classes and their performance (R3), the Kubernetes way.

A platform admin describes each storage class tenants may use as a storage flavor: its
StorageClass, its CSI driver, and the IOPS and throughput each volume is provisioned with
(carried by the StorageClass's parameters, or by a VolumeAttributesClass where the cluster
has one: ``storage.k8s.io/v1`` from Kubernetes 1.34, beta before). A tenant may use only the
classes its quota names:

* per StorageClass, the namespace ResourceQuota holds
  ``<class>.storageclass.storage.k8s.io/requests.storage`` (the tenant's limit on the class)
  and, for every other class the portal knows of (the cluster's storage flavors and the
  classes read from the cluster), ``requests.storage`` and ``persistentvolumeclaims`` of 0:
  the API server's quota admission refuses such a claim with "exceeded quota";
* per VolumeAttributesClass (Kubernetes has no per-class quota key for them, only the
  ``VolumeAttributesClass`` quota scope), one more ResourceQuota scoped ``In`` the classes the
  tenant may not use, holding 0 claims.

Pure: data in, dicts out (``quotas.kube.compiler`` calls it). ``DRIVER_PARAMETERS`` is what
the docs' table of drivers says, as data: which parameter of which driver carries IOPS and
throughput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from quotas.kube import enforcement
from quotas.kube.names import PREFIX
from quotas.kube.spec import ClusterSpec, FlavorSpec, QuotaSpec

STORAGE_KIND: Final = "storage"
STORAGE_CLASS_SUFFIX: Final = ".storageclass.storage.k8s.io/"
REQUESTS_STORAGE: Final = "requests.storage"
PERSISTENT_VOLUME_CLAIMS: Final = "persistentvolumeclaims"
# The ResourceQuota that refuses claims of the VolumeAttributesClasses a tenant may not use.
RESOURCE_QUOTA_VOLUME_ATTRIBUTES: Final = f"{PREFIX}-volume-attributes"
VOLUME_ATTRIBUTES_SCOPE: Final = "VolumeAttributesClass"
# VolumeAttributesClass is GA (storage.k8s.io/v1, on by default) from Kubernetes 1.34; before,
# a cluster serves it (v1beta1, from 1.31) only with its feature gate on, which the portal
# learns by reading the classes from the cluster.
VOLUME_ATTRIBUTES_GA: Final = (1, 34)
MIB: Final = 1024**2


def class_key(storage_class: str, resource: str) -> str:
    """The ResourceQuota key of ``resource`` (requests.storage, persistentvolumeclaims)
    counted in ``storage_class`` alone."""
    return f"{storage_class}{STORAGE_CLASS_SUFFIX}{resource}"


def flavor_storage_class(flavor: FlavorSpec) -> str:
    return flavor.storage_class or flavor.name


def known_storage_classes(cluster: ClusterSpec) -> set[str]:
    """Every StorageClass the portal knows of on ``cluster``: its storage flavors' and those
    read from it."""
    return {
        flavor_storage_class(flavor) for flavor in cluster.flavors if flavor.kind == STORAGE_KIND
    } | set(cluster.storage_classes)


def known_volume_attributes_classes(cluster: ClusterSpec) -> set[str]:
    return {
        flavor.volume_attributes_class
        for flavor in cluster.flavors
        if flavor.kind == STORAGE_KIND and flavor.volume_attributes_class
    } | set(cluster.volume_attributes_classes)


def storage_class_hard(
    cluster: ClusterSpec, flavors: Mapping[str, FlavorSpec], items: Sequence[QuotaSpec]
) -> dict[str, Decimal]:
    """The per-StorageClass keys of a tenant's namespace quota: its limit on each class its
    quota names (summed where two flavors share a class), and 0 storage and 0 claims on each
    class it does not (or names with a limit of 0). A tenant whose quota names no storage
    class at all keeps the cluster's default class (under its storage total, if any): what it
    could use before classes were named, so an upgrade cuts no claims off."""
    hard: dict[str, Decimal] = {}
    allowed: set[str] = set()
    if not items and cluster.default_storage_class:
        allowed.add(cluster.default_storage_class)
    for item in items:
        storage_class = flavor_storage_class(flavors[item.flavor])
        key = class_key(storage_class, REQUESTS_STORAGE)
        hard[key] = hard.get(key, Decimal(0)) + item.limit
        if item.limit > 0:
            allowed.add(storage_class)
    for storage_class in sorted(known_storage_classes(cluster) - allowed):
        hard[class_key(storage_class, REQUESTS_STORAGE)] = Decimal(0)
        hard[class_key(storage_class, PERSISTENT_VOLUME_CLAIMS)] = Decimal(0)
    return hard


def refused_volume_attributes_classes(
    cluster: ClusterSpec, flavors: Mapping[str, FlavorSpec], items: Sequence[QuotaSpec]
) -> list[str]:
    """The VolumeAttributesClasses a tenant may not use (sorted): every one the portal knows
    of but those of the storage flavors its quota names with a limit above 0. Empty where
    the cluster has none, or cannot scope a quota by them (before 1.34 the portal must have
    read them from the cluster, which tells that the feature is on)."""
    if not cluster.volume_attributes_classes and (
        enforcement.kubernetes_minor(cluster.kubernetes_version) < VOLUME_ATTRIBUTES_GA
    ):
        return []
    allowed = {flavors[item.flavor].volume_attributes_class for item in items if item.limit > 0} - {
        ""
    }
    return sorted(known_volume_attributes_classes(cluster) - allowed)


def volume_attributes_scope(refused: Sequence[str]) -> dict[str, object]:
    """The scope selector of the quota that holds 0 claims of the ``refused`` classes."""
    return {
        "matchExpressions": [
            {"scopeName": VOLUME_ATTRIBUTES_SCOPE, "operator": "In", "values": list(refused)}
        ]
    }


# --- what the CSI drivers honour ----------------------------------------------------------


@dataclass(frozen=True)
class DriverParameters:
    """Which parameters of a CSI driver carry a volume's IOPS and throughput, in a
    StorageClass (at creation) and in a VolumeAttributesClass (changeable later; empty: the
    driver does not take them there, as far as its documentation says)."""

    driver: str
    name: str
    iops: tuple[str, ...]
    throughput: tuple[str, ...]
    throughput_unit: str  # "MiB/s", "MB/s" or "bytes/s": what the parameter counts
    vac_iops: tuple[str, ...] = ()
    vac_throughput: tuple[str, ...] = ()
    note: str = ""


DRIVER_PARAMETERS: Final = {
    p.driver: p
    for p in (
        DriverParameters(
            "ebs.csi.aws.com",
            "AWS EBS",
            iops=("iops",),
            throughput=("throughput",),
            throughput_unit="MiB/s",
            vac_iops=("iops",),
            vac_throughput=("throughput",),
            note="IOPS on gp3, io1 and io2 volumes; throughput on gp3 only.",
        ),
        DriverParameters(
            "pd.csi.storage.gke.io",
            "Google Persistent Disk and Hyperdisk",
            iops=("provisioned-iops-on-create",),
            throughput=("provisioned-throughput-on-create",),
            throughput_unit="MiB/s",
            vac_iops=("iops",),
            vac_throughput=("throughput",),
            note="Hyperdisk (and Extreme PD for IOPS) only.",
        ),
        DriverParameters(
            "disk.csi.azure.com",
            "Azure Disk",
            iops=("DiskIOPSReadWrite",),
            throughput=("DiskMBpsReadWrite",),
            throughput_unit="MB/s",
            note="Ultra Disk (UltraSSD_LRS) and Premium SSD v2 (PremiumV2_LRS) only.",
        ),
        DriverParameters(
            "rbd.csi.ceph.com",
            "Ceph RBD (ceph-csi)",
            iops=("BaseReadIops", "BaseWriteIops"),
            throughput=("BaseReadBytesPerSecond", "BaseWriteBytesPerSecond"),
            throughput_unit="bytes/s",
            note="librbd QoS, read and write apart; recent ceph-csi releases only.",
        ),
    )
}


def class_parameters(
    driver: str, iops: int | None, throughput_mib: int | None, *, volume_attributes: bool = False
) -> dict[str, str]:
    """The parameters a StorageClass (or, with ``volume_attributes``, a
    VolumeAttributesClass) of ``driver`` carries for ``iops`` and ``throughput_mib`` MiB/s;
    {} for a driver the portal does not know, or one that takes neither there."""
    known = DRIVER_PARAMETERS.get(driver)
    if known is None:
        return {}
    iops_keys = known.vac_iops if volume_attributes else known.iops
    throughput_keys = known.vac_throughput if volume_attributes else known.throughput
    parameters: dict[str, str] = {}
    if iops is not None:
        parameters.update({key: str(iops) for key in iops_keys})
    if throughput_mib is not None:
        amount = {
            "MiB/s": throughput_mib,
            "MB/s": throughput_mib * MIB // 1_000_000,
            "bytes/s": throughput_mib * MIB,
        }[known.throughput_unit]
        parameters.update({key: str(amount) for key in throughput_keys})
    return parameters


def performance_words(iops: int | None, throughput_mib: int | None) -> str:
    """ "16,000 IOPS, 1,000 MiB/s per volume"; "" when neither is set."""
    parts = []
    if iops is not None:
        parts.append(f"{iops:,} IOPS")
    if throughput_mib is not None:
        parts.append(f"{throughput_mib:,} MiB/s")
    return f"{', '.join(parts)} per volume" if parts else ""
