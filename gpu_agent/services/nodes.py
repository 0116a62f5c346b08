"""Nodes and their credentials: one-time join tokens, an agent's registration (a join token,
or in a cluster its pod's ServiceAccount token, for a node token), node tokens checked and
revoked, the cluster a node belongs to, and nodes marked stale when their agent stops
reporting. Only SHA-256 digests of secrets are stored."""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Field, Model, Q
from django.db.models.expressions import Col
from django.utils import timezone

from core.errors import ApplicationError, Conflict, PermissionDenied, ValidationFailed
from gpu_agent.agent_identity import (
    AgentIdentity,
    IdentityRefused,
    agent_identity,
    pod_node,
    service_account_named,
)
from gpu_agent.cluster_nodes import LABEL_COUNT, read_node
from gpu_agent.conf import (
    agent_service_account,
    agent_token_audience,
    join_token_ttl_default,
    register_retry_window,
    stale_after,
)
from gpu_agent.models import (
    AGENT_KEY_MAX,
    AGENT_KEY_MIN,
    HOSTNAME_MAX,
    OPEN_LAYOUT_STATES,
    OPEN_PROBE_STATES,
    VERSION_MAX,
    LayoutState,
    Node,
    NodeJoinToken,
    NodeToken,
)
from gpu_agent.services.capacity import nodes_capacity_push
from gpu_agent.services.common import check_length, iso, node_audit_id
from quotas.backends import cluster_backend
from quotas.choices import SyncBackend
from quotas.kube.applier import TIMEOUT, ApplyError, KubernetesBackend
from quotas.kube.resources import NODE, POD
from quotas.models import Cluster
from tenants.models import User
from tenants.services import audit_record
from tenants.validators import kubernetes_node_name

TOKEN_BYTES = 30  # 240 random bits: a fast hash is enough, there is no dictionary to attack
TOKEN_PREFIX_LEN = 8
JOIN_TOKEN_TTL_MIN = timedelta(minutes=1)
JOIN_TOKEN_TTL_MAX = timedelta(days=7)


logger = logging.getLogger(__name__)


class AuthenticationFailed(ApplicationError):
    """A credential the agent presented is unknown, used, expired or revoked (401)."""

    status_code = 401
    code = "authentication_failed"


class ClusterUnavailable(ApplicationError):
    """The cluster that has to vouch for an agent's ServiceAccount token could not be asked, or
    refused the portal (503: the agent tries again later)."""

    status_code = 503
    code = "cluster_unavailable"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _check_node_name(field_name: str, value: str) -> None:
    """400 naming ``field_name`` unless ``value`` is a Kubernetes node name (a DNS-1123
    subdomain: EKS's ``ip-10-0-1-23.ec2.internal``, an on-premises FQDN)."""
    if not value:
        raise ValidationFailed.for_field(field_name, "This field is required.")
    try:
        kubernetes_node_name(value)
    except ValidationError as exc:
        shown = value if len(value) <= 80 else f"{value[:77]}..."
        raise ValidationFailed.for_field(field_name, f"{shown!r} {exc.messages[0]}.") from exc


@transaction.atomic
def join_token_create(
    *,
    node_name: str,
    actor: User,
    ttl: timedelta | None = None,
    cluster: Cluster | None = None,
) -> tuple[NodeJoinToken, str]:
    """A one-time join token for ``node_name`` (a new node, or a node re-installing its agent).
    The secret is returned once; only its digest is stored."""
    _check_node_name("node", node_name)
    ttl = join_token_ttl_default() if ttl is None else ttl
    if not JOIN_TOKEN_TTL_MIN <= ttl <= JOIN_TOKEN_TTL_MAX:
        raise ValidationFailed.for_field(
            "ttl_s",
            f"{int(ttl.total_seconds())} s is outside {int(JOIN_TOKEN_TTL_MIN.total_seconds())} "
            f"to {int(JOIN_TOKEN_TTL_MAX.total_seconds())} s.",
        )
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    token = NodeJoinToken.objects.create(
        node_name=node_name,
        cluster=cluster,
        prefix=secret[:TOKEN_PREFIX_LEN],
        digest=_digest(secret),
        expires_at=timezone.now() + ttl,
        created_by=actor,
    )
    audit_record(
        actor=actor,
        action="node_join_token.created",
        obj=token,
        object_id=token.prefix,
        after={
            "node": node_name,
            "cluster": cluster.name if cluster else None,
            "prefix": token.prefix,
            "expires_at": iso(token.expires_at),
        },
    )
    return token, secret


@transaction.atomic
def agent_register(
    *, join_secret: str, hostname: str, agent_version: str, agent_key: str = ""
) -> tuple[Node, str]:
    """Exchange a join token for a node token (returned once). The join token works once and
    until it expires; registering an existing node again revokes its earlier tokens.

    Idempotent for the agent that used it: an agent that sent ``agent_key`` (a random secret
    it keeps) may send the same request again for ``AGENT_REGISTER_RETRY_S`` after the token
    was used (its first answer was lost, say to a client timeout) and gets the same node back
    with a fresh node token (the one it never received is revoked: only digests are stored,
    so a token cannot be shown twice). Anyone else presenting the used token is refused."""
    check_length("hostname", hostname, HOSTNAME_MAX)
    check_length("agent_version", agent_version, VERSION_MAX)
    check_length("agent_key", agent_key, AGENT_KEY_MAX)
    if agent_key and len(agent_key) < AGENT_KEY_MIN:
        raise ValidationFailed.for_field(
            "agent_key",
            f"is {len(agent_key)} characters long; at least {AGENT_KEY_MIN} are needed (a "
            "random secret the agent keeps), or leave it out.",
        )
    now = timezone.now()
    join = (
        NodeJoinToken.objects.select_for_update(of=("self",))
        .select_related("cluster", "created_by", "node")
        .filter(digest=_digest(join_secret))
        .first()
    )
    if join is not None and join.used_at is not None and _same_agent_retrying(join, agent_key, now):
        assert join.node is not None  # checked by _same_agent_retrying
        return _registration_repeat(join=join, node=join.node, now=now)
    if join is None or join.used_at is not None:
        raise AuthenticationFailed("Unknown or already used join token.")
    if join.expires_at <= now:
        raise AuthenticationFailed(
            f"The join token expired at {iso(join.expires_at)}; ask an admin for a new one."
        )
    node = Node.objects.select_for_update().filter(name=join.node_name).first()
    revoked: list[str] = []
    if node is None:
        try:
            with transaction.atomic():
                node = Node.objects.create(
                    name=join.node_name,
                    cluster=join.cluster,
                    hostname=hostname,
                    agent_version=agent_version,
                )
        except IntegrityError as exc:  # a concurrent registration of the same name
            raise Conflict(f"Node {join.node_name} is registering right now; retry.") from exc
        action = "node.registered"
    else:
        live = NodeToken.objects.filter(node=node, revoked_at__isnull=True)
        revoked = list(live.values_list("prefix", flat=True))
        live.update(revoked_at=now)
        node.hostname = hostname
        node.agent_version = agent_version
        fields = ["hostname", "agent_version", "cluster"]
        if join.cluster is not None and join.cluster_id != node.cluster_id:
            node.cluster = join.cluster
            # The old cluster's word is not the new one's (gpu_agent.services.cluster_nodes).
            node.cluster_seen_at, node.cluster_gpus = None, None
            node.cluster_gpu_product, node.cluster_mig = "", {}
            fields += ["cluster_seen_at", "cluster_gpus", "cluster_gpu_product", "cluster_mig"]
        node.save(update_fields=fields)
        action = "node.reregistered"
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    token = NodeToken.objects.create(
        node=node, prefix=secret[:TOKEN_PREFIX_LEN], digest=_digest(secret)
    )
    NodeJoinToken.objects.filter(pk=join.pk).update(
        used_at=now, node=node, agent_key_digest=_digest(agent_key) if agent_key else ""
    )
    audit_record(
        actor=join.created_by,
        action=action,
        obj=node,
        object_id=node_audit_id(node.name),
        after={
            "hostname": hostname,
            "agent_version": agent_version,
            "join_token": join.prefix,
            "node_token": token.prefix,
            "revoked_tokens": revoked,
        },
    )
    return node, secret


def _same_agent_retrying(join: NodeJoinToken, agent_key: str, now: datetime) -> bool:
    """The used ``join`` was used by the agent holding ``agent_key``, within the retry window,
    and its node still exists."""
    return (
        bool(agent_key)
        and bool(join.agent_key_digest)
        and secrets.compare_digest(join.agent_key_digest, _digest(agent_key))
        and join.node is not None
        and join.used_at is not None
        and now - join.used_at <= register_retry_window()
    )


def _registration_repeat(*, join: NodeJoinToken, node: Node, now: datetime) -> tuple[Node, str]:
    """The registration ``join`` made, answered again: the node's live tokens (the one whose
    answer was lost among them) revoked and a new one issued."""
    live = NodeToken.objects.filter(node=node, revoked_at__isnull=True)
    revoked = list(live.values_list("prefix", flat=True))
    live.update(revoked_at=now)
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    token = NodeToken.objects.create(
        node=node, prefix=secret[:TOKEN_PREFIX_LEN], digest=_digest(secret)
    )
    audit_record(
        actor=join.created_by,
        action="node.registration_repeated",
        obj=node,
        object_id=node_audit_id(node.name),
        after={"join_token": join.prefix, "node_token": token.prefix, "revoked_tokens": revoked},
    )
    return node, secret


# --- in-cluster agents: their pod's ServiceAccount token -------------------------------------

# Set by the GPU Operator (Node Feature Discovery's rule) on nodes with an NVIDIA GPU, before
# the device plugin advertises any: a new node of an autoscaled pool has it when its agent starts.
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"


def _join_cluster(name: str) -> Cluster:
    """The cluster an agent says it runs in; without a name, the only cluster the portal reaches
    through the Kubernetes API."""
    if name:
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise ValidationFailed.for_field("cluster", f"No cluster {name!r}.")
        if cluster.backend != SyncBackend.KUBERNETES:
            raise ValidationFailed.for_field(
                "cluster",
                f"Cluster {name} is not reached through the Kubernetes API, so the portal cannot "
                "check its ServiceAccount tokens: its agents join with join tokens.",
            )
        return cluster
    found = list(Cluster.objects.filter(backend=SyncBackend.KUBERNETES).order_by("name")[:2])
    if len(found) == 1:
        return found[0]
    raise ValidationFailed.for_field(
        "cluster",
        "Name the cluster the agent runs in (the agent's --cluster): the portal reaches "
        + ("no cluster" if not found else "several clusters")
        + " through the Kubernetes API.",
    )


def _is_gpu_node(obj: dict[str, Any]) -> bool:
    """Whether a Node object is a GPU node: GPUs advertised or counted (``read_node``), or
    labelled as having one (the GPU Operator's ``nvidia.com/gpu.present``)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    present = str(labels.get(LABEL_GPU_PRESENT, "")).lower() == "true"
    return present or LABEL_COUNT in labels or read_node(obj).gpus > 0


def _cluster_vouches(cluster: Cluster, token: str) -> tuple[AgentIdentity, str, dict[str, Any]]:
    """Ask ``cluster`` who ``token`` is (TokenReview with the portal's audience), the node its pod
    runs on (the token's word, else the Pod's ``spec.nodeName``) and that Node. Raises
    ``IdentityRefused`` when the token does not make its bearer the agent of a GPU node there,
    ``ClusterUnavailable`` when the cluster could not be asked."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    audience = agent_token_audience()
    account = service_account_named(agent_service_account())
    try:
        with cluster_backend(cluster) as backend:
            if not isinstance(backend, KubernetesBackend):
                raise ApplyError("not reached through the Kubernetes API")
            review = client.AuthenticationV1Api(backend.api).create_token_review(
                body=client.V1TokenReview(
                    api_version="authentication.k8s.io/v1",
                    kind="TokenReview",
                    spec=client.V1TokenReviewSpec(token=token, audiences=[audience]),
                ),
                _request_timeout=TIMEOUT,
            )
            status = backend.api.sanitize_for_serialization(review.status) or {}
            identity = agent_identity(
                status, audience=audience, service_account=account, cluster=cluster.name
            )
            node = identity.node or pod_node(
                backend.read(POD, namespace=identity.namespace, name=identity.pod), identity
            )
            obj = backend.read(NODE, namespace=None, name=node)
    except ApiException as exc:
        why = (
            "the portal's account there needs create on tokenreviews "
            "(deploy/kubernetes/cluster-access/node-join.yaml)"
            if exc.status == 403
            else "check the portal's credentials for it"
            if exc.status == 401
            else "try again later"
        )
        raise ClusterUnavailable(
            f"Cluster {cluster.name} refused the portal's token review (HTTP {exc.status} "
            f"{exc.reason}): {why}."
        ) from exc
    except (HTTPError, OSError) as exc:
        raise ClusterUnavailable(f"Cluster {cluster.name} could not be reached: {exc}") from exc
    except ApplyError as exc:
        raise ClusterUnavailable(f"Cluster {cluster.name}: {exc.message}") from exc
    if obj is None:
        raise IdentityRefused(f"Cluster {cluster.name} has no Node {node}.", 403)
    if not _is_gpu_node(obj):
        raise IdentityRefused(
            f"Node {node} of cluster {cluster.name} is not a GPU node: it advertises no NVIDIA "
            f"GPU and has no {LABEL_GPU_PRESENT}=true label.",
            403,
        )
    return identity, node, obj


def agent_register_in_cluster(
    *,
    service_account_token: str,
    cluster_name: str = "",
    node_claim: str = "",
    hostname: str = "",
    agent_version: str = "",
) -> tuple[Node, str]:
    """Register the agent of an in-cluster GPU node with its pod's ServiceAccount token, no join
    token and no admin step: the cluster's TokenReview vouches for the token (the portal's
    audience, the agents' ServiceAccount, bound to a pod) and names the node the pod runs on;
    the node registers under that name in that cluster (a new node, or again: its earlier node
    tokens are revoked) and gets a node token (returned once). ``node_claim``: the node the
    agent believes it is on; another than the token's is refused. Refused: 401 (not a valid
    token for the portal), 403 (another account's, a pod on another node, not a GPU node of the
    cluster, a node the portal has in another cluster); nothing is registered then."""
    check_length("hostname", hostname, HOSTNAME_MAX)
    check_length("agent_version", agent_version, VERSION_MAX)
    if node_claim:
        _check_node_name("node", node_claim)
    cluster = _join_cluster(cluster_name)
    try:
        identity, node_name, _ = _cluster_vouches(cluster, service_account_token)
        if node_claim and node_claim != node_name:
            raise IdentityRefused(
                f"The token's pod {identity.namespace}/{identity.pod} runs on node {node_name}, "
                f"not {node_claim}.",
                403,
            )
        try:  # what the API server checks itself: a cluster that says otherwise is broken
            kubernetes_node_name(node_name)
        except ValidationError as exc:
            raise IdentityRefused(
                f"Node {node_name[:80]!r} cannot join: its name {exc.messages[0]}.", 403
            ) from exc
        return _node_join(
            cluster=cluster,
            identity=identity,
            node_name=node_name,
            hostname=hostname,
            agent_version=agent_version,
        )
    except IdentityRefused as exc:
        logger.warning("in-cluster join refused (cluster %s): %s", cluster.name, exc.message)
        if exc.status == 401:
            raise AuthenticationFailed(exc.message) from exc
        raise PermissionDenied(exc.message) from exc


@transaction.atomic
def _node_join(
    *, cluster: Cluster, identity: AgentIdentity, node_name: str, hostname: str, agent_version: str
) -> tuple[Node, str]:
    now = timezone.now()
    node = (
        Node.objects.select_for_update(of=("self",))
        .select_related("cluster")
        .filter(name=node_name)
        .first()
    )
    revoked: list[str] = []
    if node is None:
        try:
            with transaction.atomic():
                node = Node.objects.create(
                    name=node_name, cluster=cluster, hostname=hostname, agent_version=agent_version
                )
        except IntegrityError as exc:  # a concurrent registration of the same name
            raise Conflict(f"Node {node_name} is registering right now; retry.") from exc
        action = "node.registered"
    else:
        if node.cluster_id != cluster.pk:
            where = f"cluster {node.cluster.name}" if node.cluster else "no cluster"
            raise IdentityRefused(
                f"Node {node_name} is registered in {where}, not {cluster.name}: a platform "
                "admin moves it (or removes it) first.",
                403,
            )
        live = NodeToken.objects.filter(node=node, revoked_at__isnull=True)
        revoked = list(live.values_list("prefix", flat=True))
        live.update(revoked_at=now)
        node.hostname, node.agent_version = hostname, agent_version
        node.save(update_fields=["hostname", "agent_version"])
        action = "node.reregistered"
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    token = NodeToken.objects.create(
        node=node, prefix=secret[:TOKEN_PREFIX_LEN], digest=_digest(secret)
    )
    audit_record(
        actor=None,
        action=action,
        obj=node,
        object_id=node_audit_id(node.name),
        after={
            "hostname": hostname,
            "agent_version": agent_version,
            "cluster": cluster.name,
            "service_account": identity.account,
            "pod": f"{identity.namespace}/{identity.pod}",
            "node_token": token.prefix,
            "revoked_tokens": revoked,
        },
    )
    return node, secret


def _columns(model: type[Model]) -> list[Field[Any, Any]]:
    return list(model._meta.concrete_fields)


# The live token, its node and the node's open work, in one statement that PostgreSQL and
# SQLite both run. Plain SQL built once: the ORM's Exists / Subquery annotations cost more
# Python to compile per request than the whole of a quiet report.
# Column names come from the models' meta, every value is a parameter (S608 below).
_TOKEN_WITH_WORK = (
    "SELECT "  # noqa: S608
    + ", ".join(f't."{f.column}"' for f in _columns(NodeToken))
    + ", "
    + ", ".join(f'n."{f.column}"' for f in _columns(Node))
    + """,
  EXISTS (SELECT 1 FROM gpu_agent_miglayout l JOIN gpu_agent_gpu g ON g.id = l.gpu_id
          WHERE g.node_id = n.id AND l.state IN (%s, %s, %s)),
  (SELECT count(*) FROM gpu_agent_isolationprobe p JOIN gpu_agent_gpu g ON g.id = p.gpu_id
   WHERE g.node_id = n.id AND p.state IN (%s, %s))
FROM gpu_agent_nodetoken t JOIN gpu_agent_node n ON n.id = t.node_id
WHERE t.digest = %s AND t.revoked_at IS NULL"""
)
_WORK_STATES = [
    s.value for s in (*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED, *OPEN_PROBE_STATES)
]


def _token_with_work(digest: str) -> NodeToken | None:
    """The live token of ``digest`` with its node, the node's ``open_work`` set (a layout open:
    pending, applying or reboot-required; its open isolation probes)."""
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_WITH_WORK, [*_WORK_STATES, digest])
        row = cursor.fetchone()
    if row is None:
        return None
    token_fields, node_fields = _columns(NodeToken), _columns(Node)
    split = len(token_fields)
    values = list(row)
    # The conversions the ORM applies to these columns (SQLite hands datetimes back naive).
    for i, field in enumerate([*token_fields, *node_fields]):
        column = Col("t" if i < split else "n", field)
        for convert in [
            *connection.ops.get_db_converters(column),
            *field.get_db_converters(connection),  # type: ignore[attr-defined]  # Field has it; the stubs lack it
        ]:
            values[i] = convert(values[i], column, connection)
    token = NodeToken.from_db(connection.alias, [f.attname for f in token_fields], values[:split])
    node = Node.from_db(
        connection.alias, [f.attname for f in node_fields], values[split : split + len(node_fields)]
    )
    node.open_work = (bool(row[-2]), int(row[-1]))
    token.node = node
    return token


def node_token_authenticate(*, secret: str, with_work: bool = False) -> NodeToken | None:
    """The live node token for ``secret`` (with its node), else None. ``with_work``: the same
    query also reads the node's open work, set on the node as ``open_work`` (a layout open:
    pending, applying or reboot-required; its open isolation probes), which a quiet report
    answers from (``reports.report_ingest``) without a query of its own."""
    now = timezone.now()
    if with_work:
        token = _token_with_work(_digest(secret))
    else:
        token = (
            NodeToken.objects.select_related("node")
            .filter(digest=_digest(secret), revoked_at__isnull=True)
            .first()
        )
    if token is None:
        return None
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=5):
        # Coarse on purpose: agents call every few seconds.
        NodeToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


@transaction.atomic
def node_token_revoke(*, node: Node, actor: User) -> int:
    """Revoke every live token of ``node``; its agent answers 401 from now on and needs a new
    join token. Returns how many were revoked."""
    live = list(
        NodeToken.objects.select_for_update()
        .filter(node=node, revoked_at__isnull=True)
        .values_list("pk", "prefix")
    )
    prefixes = [prefix for _, prefix in live]
    count = NodeToken.objects.filter(pk__in=[pk for pk, _ in live]).update(
        revoked_at=timezone.now()
    )
    if count:
        audit_record(
            actor=actor,
            action="node_token.revoked",
            obj=node,
            object_id=node_audit_id(node.name),
            after={"prefixes": prefixes},
        )
    return count


@transaction.atomic
def node_update(*, node: Node, actor: User, cluster: Cluster | None) -> Node:
    """Set the cluster a node belongs to (everything else about a node comes from its agent)."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node.pk)
    before = locked.cluster.name if locked.cluster else None
    after = cluster.name if cluster else None
    if before != after:
        # What the old cluster said of the node is not the new one's word: its next reading
        # (gpu_agent.services.cluster_nodes) confirms it there, or not.
        Node.objects.filter(pk=node.pk).update(
            cluster=cluster,
            cluster_seen_at=None,
            cluster_gpus=None,
            cluster_gpu_product="",
            cluster_mig={},
        )
        audit_record(
            actor=actor,
            action="node.updated",
            obj=locked,
            object_id=node_audit_id(locked.name),
            before={"cluster": before},
            after={"cluster": after},
        )
    node.cluster = cluster
    if before != after:  # its MIG capacity parts move with it (unconfirmed until read there)
        nodes_capacity_push(nodes=[node], moved=True)
    return node


@transaction.atomic
def node_remove(*, node: Node, actor: User) -> None:
    """Take a node out of the fleet (platform admins): its GPUs, MIG layouts and tokens go with
    it, and its part of MIG flavors' capacity is pushed away. Refused (409) while its agent
    still reports: revoke its tokens first and remove it once it is stale, or its agent would
    keep reporting for a node the portal no longer knows. Audited."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node.pk)
    if not locked.stale and locked.last_report_at is not None:
        raise Conflict(
            f"Node {locked.name} still reports: revoke its tokens and remove it once it is "
            "stale (no report for AGENT_STALE_AFTER_S).",
            fields={"name": [f"{locked.name} still reports"]},
        )
    audit_record(
        actor=actor,
        action="node.removed",
        obj=locked,
        object_id=node_audit_id(locked.name),
        before={
            "name": locked.name,
            "cluster": locked.cluster.name if locked.cluster else None,
            "hostname": locked.hostname,
            "gpus": locked.gpus.count(),
            "last_report_at": iso(locked.last_report_at),
        },
    )
    locked.delete()
    nodes_capacity_push(nodes=[locked], moved=True)  # its parts go: it reports no instances


# --- stale nodes -------------------------------------------------------------------------


@transaction.atomic
def nodes_mark_stale(*, now: datetime | None = None) -> list[str]:
    """Mark nodes whose agent stopped reporting (no report for ``AGENT_STALE_AFTER_S``) stale.
    Idempotent; returns the names marked."""
    now = now or timezone.now()
    cutoff = now - stale_after()
    candidates = list(
        Node.objects.select_for_update(skip_locked=True)
        .filter(stale=False)
        .filter(
            Q(last_report_at__lt=cutoff) | Q(last_report_at__isnull=True, created_at__lt=cutoff)
        )
        .only("pk", "name", "last_report_at", "cluster_id")
    )
    if not candidates:
        return []
    Node.objects.filter(pk__in=[n.pk for n in candidates], stale=False).update(stale=True)
    for node in candidates:
        audit_record(
            actor=None,
            action="node.stale",
            obj=node,
            object_id=node_audit_id(node.name),
            before={"stale": False},
            after={"stale": True, "last_report_at": iso(node.last_report_at)},
        )
    nodes_capacity_push(nodes=candidates)  # their MIG instances no longer count
    return [n.name for n in candidates]
