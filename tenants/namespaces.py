"""Which namespaces the portal may give a tenant and write into: the rule, with no Django in
it, so that the tenants service (when a namespace is added) and the push (before anything is
written into one) read the same list.

A namespace is refused when it is a system namespace: Kubernetes' own (``kube-*``,
``default``), those of the components the portal works with (Kueue, Volcano, NVIDIA's GPU,
network and DRA operators, cert-manager, the local-path provisioner, OpenShift's), the portal's
own (``PORTAL_NAMESPACE``) and its node agent's (``gpu-agent``), and, per cluster, the namespace Kueue's configuration names, the GPU
Operator's namespace and the cluster's ``reserved_namespaces``. A pattern ending in ``*``
matches every name it begins.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

# (pattern, whose): a trailing "*" matches a prefix.
SYSTEM_NAMESPACES: tuple[tuple[str, str], ...] = (
    ("kube-*", "Kubernetes' own, as kube-system, kube-public and kube-node-lease"),
    ("default", "Kubernetes' default namespace"),
    ("kueue-system", "Kueue's"),
    ("volcano-system", "Volcano's"),
    ("volcano-monitoring", "Volcano's monitoring"),
    ("gpu-operator", "NVIDIA GPU Operator's"),
    ("nvidia-gpu-operator", "NVIDIA GPU Operator's (OpenShift)"),
    ("nvidia-network-operator", "NVIDIA Network Operator's"),
    ("nvidia-dra-driver-gpu", "NVIDIA's DRA driver's"),
    ("cert-manager", "cert-manager's"),
    ("local-path-storage", "the local-path storage provisioner's"),
    ("openshift-*", "OpenShift's"),
    # deploy/kubernetes/node-agent/namespace.yaml
    ("gpu-agent", "the portal's node agent's"),
)
PORTAL_NAMESPACE_DEFAULT = "gpu-quota-portal"


_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?|[a-z0-9][-a-z0-9]*\*")


def read_patterns(lines: Iterable[str]) -> list[str]:
    """Namespace patterns an admin typed (one per line): a namespace name, or the start of one
    ending in ``*``; ValueError naming the first that is neither. Blank lines are dropped,
    repeats kept once."""
    patterns: list[str] = []
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if len(text) > 63 or not _PATTERN.fullmatch(text):
            raise ValueError(
                f"{text!r} is not a namespace name (lowercase letters, digits and '-', at most "
                "63) nor the start of one ending in *"
            )
        patterns.append(text)
    return list(dict.fromkeys(patterns))


def pattern_matches(pattern: str, name: str) -> bool:
    """``kube-*`` matches every name beginning ``kube-``; anything else the name itself."""
    pattern = pattern.strip()
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def reserved_reason(
    name: str,
    *,
    portal_namespace: str = PORTAL_NAMESPACE_DEFAULT,
    extra: Iterable[tuple[str, str]] = (),
) -> str | None:
    """Why ``name`` is a namespace no tenant may have and the portal never writes into, in
    words ("kube-system is a system namespace (Kubernetes' own ...)"); None when it may.
    ``extra``: (pattern, why) pairs a cluster adds."""
    if portal_namespace and name == portal_namespace:
        return f"{name} is the portal's own namespace"
    for pattern, whose in SYSTEM_NAMESPACES:
        if pattern_matches(pattern, name):
            shown = "" if pattern == name else f", {pattern}"
            return f"{name} is a system namespace ({whose}{shown})"
    for pattern, why in extra:
        if pattern and pattern_matches(pattern, name):
            return f"{name} is reserved: {why}"
    return None


# What adopting a namespace would write, per cluster (``tenant=``, ``namespace=`` in, a list of
# {"cluster", "objects", "state"} out): the portal's URLs hand tenants' adoption page and API
# quotas' compiler of it (``quotas.sync.namespace_adoption_preview``); tenants asks no app.
AdoptionPreview = Callable[..., list[dict[str, Any]]]


def no_clusters(**_: Any) -> list[dict[str, Any]]:
    """The preview where no cluster app is composed in: nothing is written anywhere."""
    return []
