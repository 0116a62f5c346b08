"""The push: compile what the database says, validate it, apply it through the cluster's
backend (``quotas.backends``), and record where each tenant stands (``TenantSync``: the
generation the cluster has observed).

A tenant pass delivers an outbox row (``outbox_deliver``, the ``quotas.tasks.deliver_outbox``
task); a full pass (``cluster_reconcile``, Celery beat) re-applies whatever was changed by
hand in the cluster, audits the drift and prunes what the portal owns and no longer wants.
Also the reads around it: a tenant's manifests, the dry run of a change, what the cluster
says about a tenant.

Apps above learn where a push stands through two hooks (``PUSH_STARTED``, ``PUSHED``) they
register in their ``AppConfig.ready()``; this module imports none of them. The approvals app
moves its requests (approved -> applying -> applied / failed) that way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import yaml
from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.utils import timezone

from core.memory import collector_paused
from identity.models import GroupMapping
from quotas.backends import cluster_backend
from quotas.choices import GPU_RESOURCE, SyncBackend, SyncState
from quotas.kube import compiler, enforcement, fair_sharing, vgpu
from quotas.kube.applier import (
    NAMESPACE,
    ApplyError,
    ApplyResult,
    Backend,
    Change,
    KubernetesBackend,
    NamespaceGuard,
    RetryableError,
    Scope,
    apply_objects,
)
from quotas.kube.applier import (
    sort_for_apply as apply_sort,
)
from quotas.kube.describe import GpuShares, describe_changes
from quotas.kube.diff import differences
from quotas.kube.memo import ApplyMemo, CompileMemo, Digests, ValidationMemo
from quotas.kube.resources import (
    CLUSTER_QUEUE,
    CONFIG_MAP,
    DEPLOYMENT,
    KINDS,
    RESOURCE_QUOTA,
    kind_of,
)
from quotas.kube.spec import (
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
    ClusterSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.kube.subjects import refused_group
from quotas.kube.validate import validate_objects
from quotas.loader import cluster_spec, egress_specs, tenant_specs
from quotas.models import Cluster, QuotaSet, SyncOutbox, TenantSync
from quotas.services import cluster_namespace_rules, cluster_namespaces_reserve
from quotas.storage import storage_classes_refresh
from tenants.models import Namespace, Tenant
from tenants.services import audit_record, system_namespace_reason

logger = logging.getLogger(__name__)


def desired_objects(
    cluster: Cluster,
    *,
    tenant: Tenant | None = None,
    memo: CompileMemo | None = None,
    digests: Digests | None = None,
) -> list[dict[str, Any]]:
    """What the portal owns on ``cluster`` (for one tenant: its objects and the cluster-wide
    objects they need), compiled from the quotas in force. With a ``memo`` (the full pass's,
    ``_PassMemo``), a tenant whose spec is as last pass is not compiled again; the objects'
    digests go to ``digests``."""
    spec = cluster_spec(cluster)
    if tenant is None:
        if memo is None:
            return compiler.compile_cluster(spec, tenant_specs(cluster))
        found = digests if digests is not None else Digests()
        memo.begin(spec)
        objects = compiler.compile_cluster(
            spec,
            tenant_specs(cluster),
            tenant_objects=lambda c, t: memo.tenant_objects(compiler.compile_tenant, c, t, found),
        )
        memo.end()
        return objects
    # A department's Cohort (R14) depends on every tenant of its tree (its borrowingLimit
    # leaves room for their guarantees): compile the cluster-wide objects from the whole tree
    # the tenant is in, so that pushing one team never writes its department's Cohort short.
    tenants = tenant_specs(cluster, tenant_ids=_tree_ids(tenant))
    objects = list(compiler.compile_cluster_wide(spec, tenants))
    for t in tenants:
        if t.slug == tenant.slug:
            objects.extend(compiler.compile_tenant(spec, t))
    return objects


def _tree_ids(tenant: Tenant) -> list[int]:
    """The tenant, and when it is in a department, every tenant under its topmost one."""
    top = tenant
    seen = {top.pk}
    while top.parent_id is not None and top.parent_id not in seen:
        top = Tenant.objects.only("pk", "parent_id").get(pk=top.parent_id)
        seen.add(top.pk)
    ids = {tenant.pk, top.pk}
    level = [top.pk]
    while level:
        level = [
            pk
            for pk in Tenant.objects.filter(parent_id__in=level).values_list("pk", flat=True)
            if pk not in ids
        ]
        ids.update(level)
    return sorted(ids)


def namespace_guard(cluster: Cluster, *, tenant: Tenant | None = None) -> NamespaceGuard:
    """Which namespaces a push to ``cluster`` may write into (defence in depth behind the
    check when a namespace is added): never a system namespace nor one the cluster reserves,
    even where a tenant has it (old data, or a namespace reserved since), and never one that
    exists without the portal's label unless a platform admin adopted it."""
    rules = cluster_namespace_rules(cluster)

    def reserved(name: str) -> str | None:
        reason = system_namespace_reason(name, extra=rules)
        if reason is None:
            return None
        return (
            f"{reason}: the portal does not write into it on {cluster.name}; "
            "a platform admin takes it away from the tenant"
        )

    adopted = Namespace.objects.filter(adopted_at__isnull=False)
    if tenant is not None:
        adopted = adopted.filter(tenant=tenant)
    return NamespaceGuard(
        reserved=reserved,
        adopted=frozenset(adopted.values_list("name", flat=True)),
        cluster=cluster.name,
    )


def _apply_gated(
    backend: Backend,
    desired: list[dict[str, Any]],
    scope: Scope,
    *,
    dry_run: bool = False,
    guard: NamespaceGuard | None = None,
    memo: ApplyMemo | None = None,
    digests: Digests | None = None,
) -> ApplyResult:
    """``apply_objects``, the admission policy first: under "Kueue manages everything" each
    namespace's quota holds the whole limit because the policy keeps other work out, so if the
    cluster refuses the policy nothing else is written (the namespaces keep what they had)."""
    gate_kinds = [kind for kind in KINDS if kind.group == "admissionregistration.k8s.io"]
    gate = [obj for obj in desired if kind_of(obj) in gate_kinds]
    remembered: dict[str, Any] = {"memo": memo, "digests": digests}
    if not gate:
        return apply_objects(backend, desired, scope, dry_run=dry_run, guard=guard, **remembered)
    first = apply_objects(backend, gate, scope, kinds=gate_kinds, dry_run=dry_run, **remembered)
    if first.failed:
        return first
    rest = [obj for obj in desired if kind_of(obj) not in gate_kinds]
    kinds = [kind for kind in KINDS if kind not in gate_kinds]
    result = apply_objects(
        backend, rest, scope, kinds=kinds, dry_run=dry_run, guard=guard, **remembered
    )
    result.created[:0] = first.created
    result.changed[:0] = first.changed
    result.restamped[:0] = first.restamped
    result.pruned[:0] = first.pruned
    result.unchanged += first.unchanged
    result.skipped[:0] = first.skipped
    return result


def kueue_config_refresh(cluster: Cluster, backend: Backend) -> None:
    """Read Kueue's manager configuration from the cluster (where the backend can read, and
    the cluster runs Kueue) and keep it on ``cluster`` when it changed: what the admission
    policy of "Kueue manages everything" is compiled from, and what the cluster page reports.
    Unreadable, the policy falls back to its strict reading and the page says "unknown"; the
    push goes on either way."""
    if not cluster.has_kueue or not isinstance(backend, KubernetesBackend):
        return
    try:
        configmap = backend.read(
            CONFIG_MAP,
            namespace=enforcement.KUEUE_CONFIG_NAMESPACE,
            name=enforcement.KUEUE_CONFIG_NAME,
        )
    except RetryableError:
        raise
    except ApplyError as exc:
        config, error = (
            None,
            f"reading ConfigMap {enforcement.KUEUE_CONFIG_NAMESPACE}/{enforcement.KUEUE_CONFIG_NAME}: {exc.message}",
        )
    else:
        if configmap is None:
            config, error = (
                None,
                (
                    f"no ConfigMap {enforcement.KUEUE_CONFIG_NAMESPACE}/"
                    f"{enforcement.KUEUE_CONFIG_NAME} on the cluster"
                ),
            )
        else:
            try:
                config, error = enforcement.parse_kueue_config(configmap).as_json(), ""
                # What Kueue runs of fair sharing, for the cluster page's verdict.
                config["fairSharing"] = fair_sharing.kueue_settings(
                    configmap, enforcement.KUEUE_CONFIG_KEY
                )
                # Whether Kueue counts vGPU memory and compute (quotas.kube.vgpu).
                config["vgpuTransformations"] = vgpu.kueue_transformations_found(
                    configmap, enforcement.KUEUE_CONFIG_KEY
                )
            except ValueError as exc:
                config, error = None, f"Kueue's configuration: {exc}"
    now = timezone.now()
    if config != cluster.kueue_config or error[:500] != cluster.kueue_config_error:
        cluster.kueue_config, cluster.kueue_config_error = config, error[:500]
        cluster.kueue_config_read_at = now
        Cluster.objects.filter(pk=cluster.pk).update(
            kueue_config=config, kueue_config_error=error[:500], kueue_config_read_at=now
        )
        # The namespace Kueue's configuration names is one no tenant may have.
        cluster_namespaces_reserve(cluster_id=cluster.pk)


# How stale "read at" may grow while HAMi's version stays the same.
HAMI_REREAD = timedelta(minutes=10)


def hami_refresh(cluster: Cluster, backend: Backend) -> None:
    """Read HAMi's version from its scheduler Deployment (``kube-system/hami-scheduler``, as
    HAMi's Helm chart installs it; where the backend can read) and keep it on ``cluster`` with
    the time it was read: "" when there is none. The compiler leaves out the vGPU flavors of a
    cluster whose HAMi is missing or too old (``quotas.kube.vgpu.usable``), and the cluster's
    pages say why (``quotas.selectors.vgpu_flavor_problems``). A refusal (an older
    cluster-access install without the right to read it) keeps what was known."""
    if not isinstance(backend, KubernetesBackend):
        return
    try:
        deployment = backend.read(
            DEPLOYMENT, namespace=vgpu.HAMI_NAMESPACE, name=vgpu.HAMI_DEPLOYMENT
        )
    except RetryableError:
        raise
    except ApplyError:
        return
    version, now = vgpu.hami_version_of(deployment), timezone.now()
    read_at = cluster.hami_read_at
    if version == cluster.hami_version and read_at is not None and now - read_at < HAMI_REREAD:
        return  # unchanged, and said recently: no write on every push
    cluster.hami_version, cluster.hami_read_at = version, now
    Cluster.objects.filter(pk=cluster.pk).update(hami_version=version, hami_read_at=now)


@dataclass
class PushOutcome:
    generation: int  # the quota set generation the pass pushed
    result: ApplyResult | None = None
    error: str = ""
    retryable: bool = False
    drifted: list[dict[str, Any]] = field(default_factory=list)
    # What the push left out on purpose, in words (a group mapping it would not bind): kept
    # on the tenant's sync state even when everything else went through.
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error and (self.result is None or not self.result.failed)

    @property
    def message(self) -> str:
        if self.error:
            return self.error
        if self.result and self.result.failed:
            return "; ".join(
                [f"{key[1]} {key[3]}: {msg}" for key, msg in self.result.failed] + self.notes
            )
        return "; ".join(self.notes)


def _generation(tenant: Tenant, cluster: Cluster) -> int:
    return (
        QuotaSet.objects.filter(tenant=tenant, cluster=cluster)
        .values_list("generation", flat=True)
        .first()
        or 0
    )


def tenant_push(*, tenant: Tenant, cluster: Cluster, dry_run: bool = False) -> PushOutcome:
    """Apply one tenant's objects on one cluster as they are now (the newest generation covers
    every older one). Records the outcome in ``TenantSync`` (not for a dry run)."""
    generation = _generation(tenant, cluster)
    outcome = PushOutcome(generation=generation, notes=_unbound_groups(tenant))
    if cluster.backend == SyncBackend.NONE:
        # Quotas kept in the portal only: the quota set in force is all there is to apply.
        if not dry_run:
            _record(tenant, cluster, outcome)
        return outcome
    try:
        with cluster_backend(cluster) as backend:
            kueue_config_refresh(cluster, backend)
            storage_classes_refresh(cluster, backend, always=False)
            if not dry_run:
                hami_refresh(cluster, backend)
            desired = desired_objects(cluster, tenant=tenant)
            errors = validate_objects(desired, kubernetes_version=cluster.kubernetes_version)
            if errors:
                # The compiler made an object the cluster would refuse: nothing is sent, the
                # last good state stays in place.
                outcome.error = "invalid objects: " + "; ".join(errors[:5])
            else:
                outcome.result = _apply_gated(
                    backend,
                    desired,
                    Scope(cluster.name, tenant=tenant.slug),
                    dry_run=dry_run,
                    guard=namespace_guard(cluster, tenant=tenant),
                )
    except RetryableError as exc:
        outcome.error, outcome.retryable = exc.message, True
    except ApplyError as exc:
        outcome.error = exc.message
    if not dry_run:
        _record(tenant, cluster, outcome)
    return outcome


def _unbound_groups(tenant: Tenant) -> list[str]:
    """Group mappings of ``tenant`` its RoleBindings leave out (``quotas.kube.subjects``: a
    legacy row naming one of Kubernetes' ``system:`` groups), each in words."""
    groups = GroupMapping.objects.filter(tenant=tenant).values_list("group", flat=True)
    notes = []
    for group in sorted(set(groups)):
        reason = refused_group(group)
        if reason is not None:
            notes.append(
                f"group mapping {group!r} is not bound in the RoleBindings: {reason}; "
                "a platform admin deletes that mapping"
            )
    return notes


# Who learns where a tenant's push stands. Each hook is called with keyword arguments:
#
# - ``PUSH_STARTED``: ``tenant_id``, ``cluster_id``, ``generation``: an outbox row's push of
#   every quota set generation up to ``generation`` is about to start (in a transaction of its
#   own, before any I/O);
# - ``PUSHED``: ``tenant_id``, ``cluster_id``, ``generation``, ``outcome`` (a ``PushOutcome``):
#   a push ended, ok (the cluster has observed ``generation``), failed for good, or to be
#   retried. Called in the transaction that records it (``TenantSync``, the outbox rows), so
#   what the cluster observed and what a hook derives from it commit together or not at all.
#
# Registered in the AppConfig.ready() of the apps above (approvals), which this app never
# imports.
PUSH_STARTED: list[Callable[..., object]] = []
PUSHED: list[Callable[..., object]] = []


@transaction.atomic
def _record(tenant: Tenant, cluster: Cluster, outcome: PushOutcome) -> TenantSync:
    now = timezone.now()
    sync, _ = TenantSync.objects.select_for_update().get_or_create(tenant=tenant, cluster=cluster)
    sync.desired_generation = max(sync.desired_generation, outcome.generation)
    sync.last_attempt_at = now
    if outcome.result is not None:
        sync.last_result = outcome.result.summary()
    if outcome.ok:
        sync.state = SyncState.IN_SYNC
        sync.applied_generation = max(sync.applied_generation, outcome.generation)
        sync.attempts = 0
        kept = (
            ["kept in the portal only (backend none)"]
            if cluster.backend == SyncBackend.NONE
            else []
        )
        sync.message = "; ".join(kept + outcome.notes)[:2000]
        sync.last_applied_at = now
        SyncOutbox.objects.filter(
            tenant=tenant,
            cluster=cluster,
            generation__lte=outcome.generation,
            completed_at__isnull=True,
        ).update(completed_at=now, last_error="")
    else:
        sync.state = SyncState.APPLYING if outcome.retryable else SyncState.FAILED
        sync.attempts = F("attempts") + 1
        sync.message = outcome.message[:2000]
        open_rows = SyncOutbox.objects.filter(
            tenant=tenant, cluster=cluster, completed_at__isnull=True
        )
        if outcome.retryable:
            open_rows.update(last_error=sync.message)
        else:
            # A permanent failure is not retried by the sweep; "retry" re-opens it.
            open_rows.update(completed_at=now, last_error=sync.message)
    sync.save()
    sync.refresh_from_db()
    for hook in PUSHED:
        hook(
            tenant_id=tenant.pk,
            cluster_id=cluster.pk,
            generation=outcome.generation,
            outcome=outcome,
        )
    return sync


def cluster_reconcile(*, cluster: Cluster) -> PushOutcome:
    """A full pass over ``cluster``: re-apply what differs (hand edits), prune what the portal
    owns and no longer wants, and audit each repaired drift with its diff."""
    outcome = PushOutcome(generation=0)
    with cluster_push_lock(cluster=cluster) as held:
        if held:
            with collector_paused():  # core/memory.py: a third of the pass at 10,000 tenants
                outcome = _reconcile_locked(cluster, outcome)
        else:
            outcome.error, outcome.retryable = "a tenant push is under way; reconcile later", True
    if outcome.error:
        logger.warning("reconcile of %s failed: %s", cluster.name, outcome.error)
    return outcome


def cluster_reconcile_by_id(*, cluster_id: int) -> PushOutcome | None:
    """``cluster_reconcile`` of the cluster as the database has it now (the beat's task); None
    when it was deleted since it was listed."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    return None if cluster is None else cluster_reconcile(cluster=cluster)


def clusters_to_reconcile() -> list[int]:
    """The clusters a full pass can reach (not those kept in the portal only)."""
    return list(
        Cluster.objects.exclude(backend=SyncBackend.NONE)
        .order_by("name")
        .values_list("pk", flat=True)
    )


@dataclass
class _PassMemo:
    """What this process's full passes of one cluster remember of the last one
    (``quotas.kube.memo``): each tenant's compiled objects, and which live objects held what
    was desired. With the process's ``_VALIDATED``, a pass where nothing changed compiles,
    validates and compares only what did."""

    compiled: CompileMemo = field(default_factory=CompileMemo)
    applied: ApplyMemo = field(default_factory=ApplyMemo)


_PASS_MEMOS: dict[int, _PassMemo] = {}
_VALIDATED = ValidationMemo()


def reconcile_memos_clear() -> None:
    """Forget what the full passes remembered (the next pass does all the work again)."""
    _PASS_MEMOS.clear()
    _VALIDATED.clear()


def _reconcile_locked(cluster: Cluster, outcome: PushOutcome) -> PushOutcome:
    memo = _PASS_MEMOS.setdefault(cluster.pk, _PassMemo())
    digests = Digests()
    try:
        with cluster_backend(cluster) as backend:
            kueue_config_refresh(cluster, backend)
            storage_classes_refresh(cluster, backend)
            hami_refresh(cluster, backend)
            desired = desired_objects(cluster, memo=memo.compiled, digests=digests)
            errors = validate_objects(
                desired,
                kubernetes_version=cluster.kubernetes_version,
                memo=_VALIDATED,
                digests=digests,
            )
            if errors:
                outcome.error = "invalid objects: " + "; ".join(errors[:5])
                return outcome
            memo.applied.begin()
            outcome.result = _apply_gated(
                backend,
                desired,
                Scope(cluster.name),
                guard=namespace_guard(cluster),
                memo=memo.applied,
                digests=digests,
            )
            memo.applied.end()
    except RetryableError as exc:
        outcome.error, outcome.retryable = exc.message, True
        return outcome
    except ApplyError as exc:
        outcome.error = exc.message
        return outcome
    _audit_drift(cluster, desired, outcome)
    return outcome


def _audit_drift(cluster: Cluster, desired: list[dict[str, Any]], outcome: PushOutcome) -> None:
    """Changed objects of tenants that were in sync at their current generation were edited
    by hand: audit the repair with the diff. (Changes of a generation not yet applied are the
    tenant pass's business, not drift.)"""
    assert outcome.result is not None
    by_key = {
        (o["apiVersion"], o["kind"], o["metadata"].get("namespace") or "", o["metadata"]["name"]): o
        for o in desired
    }
    syncs = {
        s.tenant.slug: s
        for s in TenantSync.objects.filter(cluster=cluster).select_related("tenant")
    }
    generations = dict(
        QuotaSet.objects.filter(cluster=cluster).values_list("tenant__slug", "generation")
    )
    now = timezone.now()
    for change in outcome.result.changed:
        obj = by_key.get(change.key)
        if obj is None:
            continue
        slug = (obj["metadata"].get("labels") or {}).get(LABEL_TENANT)
        sync = syncs.get(slug) if slug else None
        if slug and (sync is None or sync.applied_generation < generations.get(slug, 0)):
            continue
        entry = {"object": change.describe(), "fields": change.detail}
        outcome.drifted.append(entry)
        audit_record(
            actor=None,
            action="cluster.drift_repaired",
            obj=cluster,
            tenant=sync.tenant if sync else None,
            object_id=f"{cluster.name}: {change.describe()}",
            before={path: d["live"] for path, d in change.detail.items()},
            after={path: d["desired"] for path, d in change.detail.items()},
        )
        if sync is not None:
            TenantSync.objects.filter(pk=sync.pk).update(
                state=SyncState.DRIFTED, drift_repaired_at=now
            )


def outbox_claim(*, outbox_id: int) -> SyncOutbox | None:
    """A worker took the row: count the attempt; None when it is already complete (a
    duplicate delivery, harmless)."""
    updated = SyncOutbox.objects.filter(pk=outbox_id, completed_at__isnull=True).update(
        dispatched_at=timezone.now(), attempts=F("attempts") + 1
    )
    if not updated:
        return None
    return SyncOutbox.objects.select_related("tenant", "cluster").get(pk=outbox_id)


def outbox_deliver(*, outbox_id: int) -> PushOutcome | None:
    """Take an outbox row and push the tenant's quotas to the cluster (the hooks hear that it
    starts and how it ended). Idempotent and safe under duplicate delivery: the push is a
    server-side apply of the state in force, a row already completed is skipped (None), and
    one tenant's pushes to one cluster run one at a time (a second delivery arriving during a
    push is retried, and finds the row completed). Raises ``RetryableError`` when the cluster
    was unreachable or another push of the tenant was under way, so that the task retries
    with backoff; the row stays open meanwhile, and the sweep sends it again if the task
    gives up or its worker dies."""
    row = outbox_claim(outbox_id=outbox_id)
    if row is None:
        return None
    tenant, cluster = row.tenant, row.cluster
    with tenant_push_lock(tenant=tenant, cluster=cluster) as held:
        if not held:
            raise RetryableError(f"a push of {tenant.slug} to {cluster.name} is already under way")
        with transaction.atomic():
            for hook in PUSH_STARTED:
                hook(tenant_id=tenant.pk, cluster_id=cluster.pk, generation=row.generation)
        outcome = tenant_push(tenant=tenant, cluster=cluster)
        if outcome.retryable:
            raise RetryableError(outcome.message)
    return outcome


# "push": the namespace of the advisory locks of tenant pushes (usage uses "usag").
PUSH_LOCK_NAMESPACE = 0x70757368


def _push_lock_key(cluster_id: int, tenant_id: int) -> int:
    return (cluster_id * 1_000_003 + tenant_id) % 2**31


@contextlib.contextmanager
def _push_locks(cluster: Cluster, tenant_ids: list[int]) -> Iterator[bool]:
    """All of these tenants' push locks on ``cluster``, or none (False) when a push holds one."""
    if connection.vendor != "postgresql":
        yield True
        return
    taken: list[int] = []
    try:
        with connection.cursor() as cursor:
            for tenant_id in tenant_ids:
                key = _push_lock_key(cluster.pk, tenant_id)
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [PUSH_LOCK_NAMESPACE, key])
                row = cursor.fetchone()
                if not (row and row[0]):
                    break
                taken.append(key)
        yield len(taken) == len(tenant_ids)
    finally:
        # A connection lost meanwhile took the locks with it.
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            for key in taken:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [PUSH_LOCK_NAMESPACE, key])


@contextlib.contextmanager
def tenant_push_lock(*, tenant: Tenant, cluster: Cluster) -> Iterator[bool]:
    """Whether this process may push ``tenant`` to ``cluster`` now: one pass at a time, so
    that two deliveries (of one outbox row or of two) neither write the same objects twice nor
    write an older generation after a newer one. A PostgreSQL session advisory lock, released
    at the end, or by the server with the connection of a worker that died; on other databases
    (SQLite: one process) always granted."""
    with _push_locks(cluster, [tenant.pk]) as held:
        yield held


@contextlib.contextmanager
def cluster_push_lock(*, cluster: Cluster) -> Iterator[bool]:
    """Every tenant's push lock on ``cluster`` (a full reconcile writes all of them), taken
    before the reconcile reads what it wants, so that it never writes an older generation over
    a tenant push; False when a tenant push is under way (reconcile later)."""
    tenant_ids = sorted(
        QuotaSet.objects.filter(cluster=cluster).values_list("tenant_id", flat=True).distinct()
    )
    with _push_locks(cluster, tenant_ids) as held:
        yield held


# --- reading: what the portal owns, what a change would do, what the cluster says -----------


def tenant_manifests(*, tenant: Tenant, cluster: Cluster) -> str:
    """The YAML the portal owns for ``tenant`` on ``cluster`` (its objects and the
    cluster-wide objects they need), in apply order: what a GitOps repository would hold."""
    objects = apply_sort(desired_objects(cluster, tenant=tenant))
    return yaml.safe_dump_all(objects, sort_keys=True, default_flow_style=False)


@dataclass(frozen=True)
class ObjectDiff:
    object: str
    change: str  # "created" | "changed" | "deleted"
    # path -> {"before", "after", "description"}: the field as Kubernetes names it, and in words
    fields: dict[str, dict[str, Any]]

    @property
    def descriptions(self) -> list[str]:
        """What changes, in words a person reads, each line once, in path order."""
        return list(dict.fromkeys(f["description"] for _, f in sorted(self.fields.items())))


def object_diff(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    shares: GpuShares | None = None,
) -> list[ObjectDiff]:
    """Object by object, what ``after`` changes against ``before`` (the generation annotation
    aside): the offline dry run of a change (R21). ``shares``: where GPUs are time-sliced
    shares, so that their amounts read as shares."""
    old = {compiler.object_key(o): o for o in before}
    new = {compiler.object_key(o): o for o in after}
    diffs = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (compiler_order(k), k)):
        shown = Change(key).describe()
        if key not in old:
            diffs.append(ObjectDiff(shown, "created", {}))
        elif key not in new:
            diffs.append(ObjectDiff(shown, "deleted", {}))
        else:
            fields = {
                path: {"before": have, "after": want}
                for path, (want, have) in differences(new[key], old[key]).items()
            }
            fields.update(
                {
                    path: {"before": have, "after": None}
                    for path, (have, _) in differences(old[key], new[key]).items()
                    if path not in fields
                }
            )
            words = describe_changes(old[key], new[key], fields, shares or GpuShares())
            for path, field_change in fields.items():
                field_change["description"] = words[path]
            if fields:
                diffs.append(ObjectDiff(shown, "changed", fields))
    return diffs


def gpu_shares(spec: ClusterSpec, quotas: Iterable[QuotaSpec]) -> GpuShares:
    """Where ``nvidia.com/gpu`` counts time-sliced shares on ``spec``'s cluster for a tenant
    with ``quotas``: per flavor, and for the namespaces' objects when every GPU quota is on
    time-sliced flavors of one number of shares per GPU."""
    by_flavor = {f.name: f.time_slicing_replicas for f in spec.flavors if f.time_slicing_replicas}
    gpu_flavors = {q.flavor for q in quotas if q.resource == GPU_RESOURCE}
    replicas = {by_flavor.get(name) for name in gpu_flavors}
    everywhere = replicas.pop() if len(replicas) == 1 else None
    return GpuShares(by_flavor, everywhere)


def compiler_order(key: tuple[str, str, str, str]) -> int:
    return compiler.apply_order({"apiVersion": key[0], "kind": key[1], "metadata": {}})


@dataclass
class DryRun:
    objects: list[ObjectDiff]
    server_checked: bool = False
    server_errors: list[str] = field(default_factory=list)
    server_message: str = ""


def change_dry_run(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: list[QuotaSpec],
    scheduling: dict[str, Any],
    server: bool = True,
    added: bool = False,
) -> DryRun:
    """What approving a change would do in the cluster: the object-level diff computed from
    the compiler (quotas in force -> quotas with ``items`` replacing their lines, or added to
    them with ``added``: a grant for a time), and, where
    the backend is a Kubernetes API, its server-side dry run (``dryRun=All``) of the objects
    that would be written."""
    spec = cluster_spec(cluster)
    current = tenant_specs(cluster, tenant_ids=[tenant.pk])
    base = current[0] if current else TenantSpec(slug=tenant.slug, generation=0, namespaces=())
    if not current:
        base = dataclasses.replace(base, namespaces=_namespaces(tenant))
    merged = {(q.flavor, q.resource): q for q in base.quotas}
    if added:  # a grant for a time: its lines on top of those in effect
        for key, (g, lim) in (((q.flavor, q.resource), (q.guaranteed, q.limit)) for q in items):
            old = merged.get(key) or QuotaSpec(key[0], key[1], Decimal(0), Decimal(0))
            merged[key] = dataclasses.replace(
                old, guaranteed=old.guaranteed + g, limit=old.limit + lim
            )
    else:
        merged.update({(q.flavor, q.resource): q for q in items})
    changes = {k: v for k, v in scheduling.items() if v is not None}
    if "egress_rules" in changes:  # the request's JSON, the spec's egress exceptions
        changes["egress"] = egress_specs(changes.pop("egress_rules"))
    proposed = dataclasses.replace(
        base,
        generation=base.generation + 1,
        quotas=tuple(sorted(merged.values(), key=lambda q: (q.flavor, q.resource))),
        **changes,
    )
    before = compiler.compile_tenant(spec, base) if current else []
    after = compiler.compile_tenant(spec, proposed)
    result = DryRun(object_diff(before, after, gpu_shares(spec, [*base.quotas, *proposed.quotas])))
    if not server or cluster.backend != SyncBackend.KUBERNETES:
        result.server_message = f"no Kubernetes API to ask (backend {cluster.backend})"
        return result
    errors = validate_objects(after, kubernetes_version=cluster.kubernetes_version)
    if errors:
        result.server_errors = errors
        return result
    try:
        with cluster_backend(cluster) as backend:
            applied = apply_objects(
                backend,
                after,
                Scope(cluster.name, tenant=tenant.slug, prune=False),
                dry_run=True,
                guard=namespace_guard(cluster, tenant=tenant),  # what the push would refuse
            )
    except ApplyError as exc:
        result.server_message = f"the cluster could not be asked: {exc.message}"
        return result
    result.server_checked = True
    result.server_errors = [f"{Change(k).describe()}: {m}" for k, m in applied.failed]
    if applied.skipped:
        result.server_message = "; ".join(applied.skipped)
    return result


def _namespaces(tenant: Tenant) -> tuple[NamespaceSpec, ...]:
    return tuple(
        NamespaceSpec(ns.name, ns.purpose, ns.quota_share)
        for ns in tenant.namespaces.order_by("name")
    )


@dataclass
class InCluster:
    """What the cluster says about a tenant: ResourceQuota use and ClusterQueue status
    (admitted / pending workloads, use and borrowing per flavor). The usage issue stores it."""

    reachable: bool
    message: str = ""
    resource_quotas: list[dict[str, Any]] = field(default_factory=list)
    cluster_queue: dict[str, Any] | None = None


def in_cluster(*, tenant: Tenant, cluster: Cluster) -> InCluster:
    if cluster.backend != SyncBackend.KUBERNETES:
        return InCluster(False, f"no Kubernetes API to read (backend {cluster.backend})")
    selector = Scope(cluster.name, tenant=tenant.slug).selectors([])[0]
    try:
        with cluster_backend(cluster) as backend:
            quotas = backend.list_owned(RESOURCE_QUOTA, selector)
            queues = backend.list_owned(CLUSTER_QUEUE, selector) if cluster.has_kueue else []
    except ApplyError as exc:
        return InCluster(False, exc.message)
    out = InCluster(True)
    for rq in sorted(quotas, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        status = rq.get("status") or {}
        out.resource_quotas.append(
            {
                "namespace": rq["metadata"]["namespace"],
                "name": rq["metadata"]["name"],
                "hard": (rq.get("spec") or {}).get("hard") or {},
                "used": status.get("used") or {},
            }
        )
    # The tenant's own queue (named after it), not a capped person's (R14).
    queues = [q for q in queues if q["metadata"]["name"] == tenant.slug] or queues[:1]
    if queues:
        status = queues[0].get("status") or {}
        out.cluster_queue = {
            "name": queues[0]["metadata"]["name"],
            "pending_workloads": status.get("pendingWorkloads", 0),
            "admitted_workloads": status.get("admittedWorkloads", 0),
            "reserving_workloads": status.get("reservingWorkloads", 0),
            "flavors_usage": status.get("flavorsUsage") or [],
        }
    return out


# --- adopting a namespace: what the push would write there ---------------------------------


def _namespace_state(cluster: Cluster, name: str) -> str:
    """The namespace ``name`` on ``cluster``, in words, as the cluster says now."""
    if cluster.backend == SyncBackend.NONE:
        return "quotas are kept in the portal only on this cluster: nothing is written"
    if cluster.backend != SyncBackend.KUBERNETES:
        return f"written as manifests (backend {cluster.backend}): nothing to ask"
    try:
        with cluster_backend(cluster) as backend:
            live = backend.read(NAMESPACE, namespace=None, name=name)  # type: ignore[attr-defined]
    except ApplyError as exc:
        return f"the cluster could not be asked: {exc.message}"
    if live is None:
        return "does not exist yet: the push creates it"
    labels = (live.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
        return "exists and carries the portal's label"
    return "exists and the portal did not create it: adopted, the push labels it and writes there"


def namespace_adoption_preview(*, tenant: Tenant, namespace: Namespace) -> list[dict[str, Any]]:
    """What the push would write into ``namespace`` on each cluster where ``tenant`` has a
    quota set, once a platform admin adopts it: the Namespace (the portal's labels and
    annotations) and the objects in it, compiled as the push would (nothing is written), and
    the namespace's state on the cluster. (Handed to tenants' adoption page and API by the
    portal's URLs: ``portal/pages.py``, ``portal/api/urls.py``.)"""
    clusters = []
    quota_sets = QuotaSet.objects.filter(tenant=tenant).select_related("cluster")
    for quota_set in quota_sets.order_by("cluster__name"):
        cluster = quota_set.cluster
        try:
            objects = [
                obj
                for obj in apply_sort(desired_objects(cluster, tenant=tenant))
                if (obj["metadata"].get("namespace") or "") == namespace.name
                or (obj["kind"] == "Namespace" and obj["metadata"]["name"] == namespace.name)
            ]
        except ValueError as exc:
            clusters.append(
                {"cluster": cluster.name, "state": f"not compiled: {exc}", "objects": []}
            )
            continue
        described = []
        for obj in objects:
            shown = Change(compiler.object_key(obj)).describe()
            if obj["kind"] == "Namespace":
                labels = ", ".join(sorted(obj["metadata"].get("labels") or {}))
                shown = f"{shown}: the portal's labels ({labels}) and annotations"
            described.append(shown)
        clusters.append(
            {
                "cluster": cluster.name,
                "state": _namespace_state(cluster, namespace.name),
                "objects": described,
            }
        )
    return clusters
