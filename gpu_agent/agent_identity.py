"""Who an in-cluster node agent is, from its cluster's TokenReview of the token it presented: the
pure part (the review's ``status`` as JSON in, an ``AgentIdentity`` or an ``IdentityRefused``
out; no Django). The service that asks the cluster and registers the node is
``gpu_agent.services.nodes.agent_register_in_cluster``.

An agent in a cluster sends its projected ServiceAccount token: bound to its Pod (the kubelet
binds every projected token to the pod it mounts it in) and to an audience of the portal's own,
so that the token is good for nothing else and the cluster's API server says which pod, and on
Kubernetes 1.30+ which node, it belongs to (k8s.io/apiserver, serviceaccount/util.go):

- ``user.username``: ``system:serviceaccount:NAMESPACE:NAME``;
- ``user.extra["authentication.kubernetes.io/pod-name"]`` and ``pod-uid``: its Pod;
- ``user.extra["authentication.kubernetes.io/node-name"]`` and ``node-uid``: the Node the Pod
  runs on (ServiceAccountTokenPodNodeInfo, on by default since 1.30); before 1.30 the service
  reads the Pod's ``spec.nodeName``;
- ``audiences``: those of ``spec.audiences`` the token was issued for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"


class IdentityRefused(Exception):
    """The token does not make its bearer a node agent: 401 (not a valid token for the portal)
    or 403 (a valid token of someone else, or of a pod on another node)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class AgentIdentity:
    """The pod a reviewed token is bound to, and its node when the token names it ("": ask the
    Pod)."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str = ""

    @property
    def account(self) -> str:
        return f"{self.namespace}/{self.service_account}"


def _one(extra: Mapping[str, Any], key: str) -> str:
    values = extra.get(key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return ""


def service_account_named(setting: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` (the ``AGENT_SERVICE_ACCOUNT`` setting) as (namespace, name)."""
    namespace, _, name = setting.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"{setting!r} is not NAMESPACE/NAME")
    return namespace, name


def agent_identity(
    status: Mapping[str, Any], *, audience: str, service_account: tuple[str, str], cluster: str
) -> AgentIdentity:
    """The agent a TokenReview's ``status`` (asked with ``spec.audiences: [audience]``) names,
    or ``IdentityRefused`` saying why not: not authenticated or not for ``audience`` (401),
    another ServiceAccount than ``service_account`` (namespace, name), or a token not bound to
    a pod (403)."""
    if status.get("authenticated") is not True:
        why = str(status.get("error") or "not authenticated")
        raise IdentityRefused(
            f"Cluster {cluster} did not accept the ServiceAccount token: {why}.", 401
        )
    if audience not in (status.get("audiences") or []):
        raise IdentityRefused(
            f"The ServiceAccount token is not for audience {audience!r}: project it with that "
            "audience.",
            401,
        )
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    namespace, name = service_account
    if username != f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}":
        raise IdentityRefused(
            f"The token is {username or 'nobody'}'s; only the node agents' ServiceAccount "
            f"{namespace}/{name} joins nodes.",
            403,
        )
    extra = user.get("extra") or {}
    pod, pod_uid = _one(extra, POD_NAME), _one(extra, POD_UID)
    if not pod or not pod_uid:
        raise IdentityRefused(
            "The ServiceAccount token is not bound to a pod: use the token the kubelet projects "
            "into the agent's pod (a serviceAccountToken volume).",
            403,
        )
    return AgentIdentity(namespace, name, pod, pod_uid, _one(extra, NODE_NAME))


def pod_node(pod: Mapping[str, Any] | None, identity: AgentIdentity) -> str:
    """The node the token's Pod runs on, from the Pod as the cluster shows it (the token names
    no node: Kubernetes before 1.30); ``IdentityRefused`` when the pod is gone, replaced (another
    uid) or not scheduled."""
    metadata = (pod or {}).get("metadata") or {}
    if pod is None or str(metadata.get("uid") or "") != identity.pod_uid:
        raise IdentityRefused(
            f"Pod {identity.namespace}/{identity.pod} of the token no longer exists.", 401
        )
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node:
        raise IdentityRefused(
            f"Pod {identity.namespace}/{identity.pod} is not scheduled on a node.", 403
        )
    return node
