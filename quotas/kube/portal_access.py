"""What the portal's own account may do in a managed cluster, and where: the names shared by
the manifests in ``deploy/kubernetes/cluster-access/`` and the code that pushes.

The portal's ServiceAccount holds cluster-wide only what must be cluster-wide (reading what it
owns, creating and labelling its namespaces, the cluster-scoped kinds it writes, the labels of
Nodes). What it writes inside a namespace comes from the ClusterRole ``NAMESPACE_ROLE``, bound
in each namespace it manages by a RoleBinding of its own (``namespace_role_binding``), so
``kubectl auth can-i create rolebindings -n kube-system`` answers no for it.

A new namespace has no such binding yet, and creating one needs ``create rolebindings`` in that
namespace: the portal writes that one binding impersonating the binder (``BINDER_USERNAME``), a
ServiceAccount that may create RoleBindings and bind ``NAMESPACE_ROLE`` only, and whose writes
the admission policy (``cluster-access/admission-policy.yaml``) confines to exactly this binding
in namespaces carrying the portal's managed-by label.

Pure data in, dicts out: nothing here imports Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

PORTAL_NAMESPACE: Final = "gpu-quota-portal"
PORTAL_SERVICE_ACCOUNT: Final = "gpu-quota-portal"
PORTAL_USERNAME: Final = f"system:serviceaccount:{PORTAL_NAMESPACE}:{PORTAL_SERVICE_ACCOUNT}"
BINDER_SERVICE_ACCOUNT: Final = "gpu-quota-portal-binder"
BINDER_USERNAME: Final = f"system:serviceaccount:{PORTAL_NAMESPACE}:{BINDER_SERVICE_ACCOUNT}"
# The web pods' account (deploy/kubernetes/cluster-access/web-reader.yaml): reads, dry runs of
# the portal's writes and an idle Workload's reactivation; the admission policy refuses it
# every other write. It is the second subject of the portal's RoleBinding in each namespace.
WEB_SERVICE_ACCOUNT: Final = "gpu-quota-portal-web"
WEB_USERNAME: Final = f"system:serviceaccount:{PORTAL_NAMESPACE}:{WEB_SERVICE_ACCOUNT}"

# The ClusterRole bound in each managed namespace, and the RoleBinding that binds it there.
NAMESPACE_ROLE: Final = "gpu-quota-portal-namespace"
ROLE_BINDING: Final = "gpu-quota-portal"
# The roles the tenants' RoleBindings may name (quotas.kube.compiler._role_bindings).
TENANT_ROLES: Final = ("edit", "kueue-batch-user-role", "view")

RBAC_GROUP: Final = "rbac.authorization.k8s.io"
IMPERSONATE_USER: Final = "Impersonate-User"


def namespace_role_binding(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The RoleBinding giving the portal ``NAMESPACE_ROLE`` in ``metadata["namespace"]``.
    ``metadata``: the compiler's for a tenant object (name ignored: always ``ROLE_BINDING``),
    so the binding carries the owner labels and is pruned with the tenant's other objects.

    Its second subject is the web pods' account: a server-side dry run is authorized as the
    write itself, so the web pods' dry run of a push needs the same verbs here, and their
    reactivation of an idle Workload the ``patch``; the admission policy refuses that account
    every write that is not a dry run but that patch of ``spec.active``."""
    namespace = str(metadata["namespace"])
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {**metadata, "name": ROLE_BINDING, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": NAMESPACE_ROLE},
        "subjects": [
            {"kind": "ServiceAccount", "name": account, "namespace": PORTAL_NAMESPACE}
            for account in (PORTAL_SERVICE_ACCOUNT, WEB_SERVICE_ACCOUNT)
        ],
    }


def is_namespace_role_binding(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is the portal's own RoleBinding of a managed namespace."""
    metadata = obj.get("metadata") or {}
    role_ref = obj.get("roleRef") or {}
    return (
        obj.get("kind") == "RoleBinding"
        and str(obj.get("apiVersion", "")).startswith(f"{RBAC_GROUP}/")
        and metadata.get("name") == ROLE_BINDING
        and role_ref.get("kind") == "ClusterRole"
        and role_ref.get("name") == NAMESPACE_ROLE
    )


def impersonation_for(obj: Mapping[str, Any]) -> dict[str, str]:
    """Headers for writing ``obj``: the portal's own namespace binding is written as the binder
    (the portal cannot create RoleBindings where it has none yet); everything else as itself."""
    if is_namespace_role_binding(obj):
        return {IMPERSONATE_USER: BINDER_USERNAME}
    return {}
