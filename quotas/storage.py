"""The storage classes a cluster serves, read from it (R3).

The compiler (``quotas.kube.storage``) gives each tenant a quota of 0 on every StorageClass and
VolumeAttributesClass its quota does not name; the classes it knows are the cluster's storage
flavors' and those this module reads from the cluster: its StorageClasses
(``storage.k8s.io/v1``) and VolumeAttributesClasses (``storage.k8s.io/v1`` from Kubernetes
1.34, ``v1beta1`` before, where the feature gate is on; a cluster that serves neither has
none). Kept on the ``Cluster`` row (``storage_classes``, ``volume_attributes_classes``), read
by every full reconcile and by a tenant push while they were never read.
"""

from __future__ import annotations

from django.utils import timezone

from quotas.kube.applier import ApplyError, Backend, KubernetesBackend, RetryableError
from quotas.kube.resources import Kind
from quotas.models import Cluster

STORAGE_CLASS = Kind("storage.k8s.io/v1", "StorageClass", "storageclasses", False, True)
VOLUME_ATTRIBUTES_CLASSES = (
    Kind("storage.k8s.io/v1", "VolumeAttributesClass", "volumeattributesclasses", False, True),
    Kind("storage.k8s.io/v1beta1", "VolumeAttributesClass", "volumeattributesclasses", False, True),
)


DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def _objects(backend: KubernetesBackend, kind: Kind) -> list[dict] | None:
    """Every ``kind`` object; None when the cluster does not serve it."""
    try:
        return list(backend.list_all(kind))
    except RetryableError:
        raise
    except ApplyError as exc:
        if exc.status == 404:
            return None
        raise


def _name(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _names(objects: list[dict] | None) -> list[str] | None:
    if objects is None:
        return None
    return sorted({_name(obj) for obj in objects} - {""})


def _default_class(objects: list[dict]) -> str:
    """The class marked default (the newest-named one where several are, as the API server's
    admission picks one of them)."""
    marked = [
        _name(obj)
        for obj in objects
        if ((obj.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)
        == "true"
    ]
    return max(marked) if marked else ""


def storage_classes_refresh(cluster: Cluster, backend: Backend, *, always: bool = True) -> bool:
    """Read the cluster's StorageClasses and VolumeAttributesClasses (where the backend can
    read; with ``always`` False only while they were never read) and keep them on ``cluster``
    when they changed. True when they changed. A refusal (the portal's account may not list
    them) keeps what was known: the storage flavors' classes are still refused."""
    if not isinstance(backend, KubernetesBackend):
        return False
    if not always and cluster.storage_classes_read_at is not None:
        return False
    try:
        class_objects = _objects(backend, STORAGE_CLASS) or []
        classes = _names(class_objects) or []
        default = _default_class(class_objects)
        attributes: list[str] = []
        for kind in VOLUME_ATTRIBUTES_CLASSES:
            found = _names(_objects(backend, kind))
            if found is not None:
                attributes = found
                break
    except RetryableError:
        raise
    except ApplyError:
        return False
    now = timezone.now()
    changed = (
        classes != cluster.storage_classes
        or attributes != cluster.volume_attributes_classes
        or default != cluster.default_storage_class
    )
    cluster.storage_classes, cluster.volume_attributes_classes = classes, attributes
    cluster.default_storage_class = default
    cluster.storage_classes_read_at = now
    Cluster.objects.filter(pk=cluster.pk).update(
        storage_classes=classes,
        volume_attributes_classes=attributes,
        default_storage_class=default,
        storage_classes_read_at=now,
    )
    return changed
