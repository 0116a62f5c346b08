"""Which identity-provider groups may be a RoleBinding subject the portal writes. No Django.

Kubernetes itself accepts any non-empty name for a Group subject (the API server's RBAC
validation requires only a name; ``pkg/apis/rbac/validation``), but every group that starts
``system:`` is the cluster's own: ``system:authenticated`` (everyone signed in),
``system:serviceaccounts`` (every workload's account), ``system:masters`` (unrestricted, past
every authorizer). Binding one of them in a tenant's namespace would hand that namespace to far
more than the tenant, so the portal never writes one, whatever a group mapping says: the group
mapping service refuses them (``identity.services``), and the compiler drops a legacy row's
group here, reported on the tenant's sync state.
"""

from __future__ import annotations

from collections.abc import Iterable

SYSTEM_GROUP_PREFIX = "system:"


def refused_group(name: str) -> str | None:
    """Why ``name`` may not be a Group subject of a RoleBinding the portal writes, in words;
    None when it may."""
    if not name or not name.strip():
        return "an empty group name binds nobody Kubernetes knows"
    if name != name.strip():
        return f"group {name!r} begins or ends with a space, which no identity provider sends"
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        return f"group {name!r} holds a control character"
    if name.lower().startswith(SYSTEM_GROUP_PREFIX):
        return (
            f"{name} is one of Kubernetes' own groups (system:...): binding it would give "
            "far more than the tenant's people access"
        )
    return None


def bindable_groups(groups: Iterable[str]) -> list[str]:
    """``groups`` without those ``refused_group`` refuses, sorted and each once."""
    return sorted({group for group in groups if refused_group(group) is None})
