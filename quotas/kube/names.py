"""Names the compiler gives Kubernetes objects, and the checks that keep them valid.

Slugs, namespaces and flavor names are validated when they are created, so a name that fails
here is a programming error (a loader or a test built a spec by hand): it raises ValueError with
the object and the reason, instead of letting the API server refuse half an apply.
"""

from __future__ import annotations

import re
from typing import Final

from quotas.kube.spec import ClusterSpec, TenantSpec

DNS1123_LABEL_MAX: Final = 63
_DNS1123_LABEL_RE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Label values: up to 63 characters, alphanumerics at both ends, "-", "_" and "." inside.
_LABEL_VALUE_RE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")

# Everything the portal names itself carries this prefix, so an operator can tell it apart.
PREFIX: Final = "gpu-portal"

# Namespaced objects: one of each per tenant namespace, so the names need not repeat the slug.
RESOURCE_QUOTA: Final = f"{PREFIX}-quota"
RESOURCE_QUOTA_INFERENCE: Final = f"{PREFIX}-inference"
RESOURCE_QUOTA_BATCH: Final = f"{PREFIX}-batch"
# 0 pods at the production PriorityClass, in the namespaces of a tenant not granted it (R15).
RESOURCE_QUOTA_NO_PRODUCTION: Final = f"{PREFIX}-no-production"
LIMIT_RANGE: Final = f"{PREFIX}-limits"
NETWORK_POLICY: Final = "deny-cross-tenant"  # the seed article's name, kept on purpose
ROLE_BINDING_EDIT: Final = f"{PREFIX}-edit"
ROLE_BINDING_VIEW: Final = f"{PREFIX}-view"
ROLE_BINDING_KUEUE_USER: Final = f"{PREFIX}-kueue-batch-user"
# Kueue sends jobs without a kueue.x-k8s.io/queue-name label to the LocalQueue named "default".
LOCAL_QUEUE: Final = "default"
TIME_SLICING_CONFIGMAP: Final = f"{PREFIX}-time-slicing"
TIME_SLICING_NAMESPACE: Final = "gpu-operator"


def dns1123_label(value: str, *, what: str) -> str:
    """Return value when it is a DNS-1123 label (what most Kubernetes names must be)."""
    if len(value) > DNS1123_LABEL_MAX:
        raise ValueError(
            f"{what} {value!r} is {len(value)} characters long; Kubernetes allows at most "
            f"{DNS1123_LABEL_MAX} (a DNS-1123 label)"
        )
    if not _DNS1123_LABEL_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 label: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


def label_value(value: str, *, what: str) -> str:
    """Return value when Kubernetes accepts it as a label value."""
    if len(value) > DNS1123_LABEL_MAX or not _LABEL_VALUE_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a valid label value (at most 63 characters: letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit)"
        )
    return value


def service_account(slug: str) -> str:
    """The ServiceAccount tenant workloads run as; the slug makes audit logs readable."""
    return dns1123_label(f"{slug}-workloads", what="ServiceAccount name")


def rbac_group(slug: str, role: str) -> str:
    """The group an identity provider puts a tenant's editors or viewers in."""
    return f"{PREFIX}:{slug}:{role}"


def parent_cohort(parent_slug: str) -> str:
    """The Kueue cohort the children of a parent tenant share: named after the parent."""
    return dns1123_label(parent_slug, what="cohort name (from the parent tenant)")


def tenant_cohort(cluster: ClusterSpec, tenant: TenantSpec) -> str:
    """The cohort a tenant's ClusterQueue joins: its parent's cohort (a department's cap and
    pool, R14, hold only for queues inside it), else its explicit cohort, else the cluster's
    root cohort. Never empty: borrowing and lending need a cohort."""
    if tenant.parent:
        return parent_cohort(tenant.parent)
    if tenant.cohort:
        return dns1123_label(tenant.cohort, what=f"cohort of tenant {tenant.slug!r}")
    return dns1123_label(cluster.root_cohort, what=f"root cohort of cluster {cluster.name!r}")


def volcano_group_queue(cohort: str) -> str:
    """A Volcano parent queue mirroring a cohort. Only leaf queues take jobs in Volcano, so the
    group must not be the parent tenant's own queue (named by its slug): hence the suffix."""
    return dns1123_label(f"{cohort}-group", what="Volcano group queue name")
