"""Pushing quotas to clusters: compile what the database says, validate it, apply it through
the cluster's backend, and record where each tenant stands (``TenantSync``).

A tenant pass follows an approval (the outbox); a full pass (``cluster_reconcile``, Celery
beat) re-applies whatever was changed by hand in the cluster, audits the drift and prunes
what the portal owns and no longer wants. The request statuses that follow from a pass are
the approvals app's business (``approvals.services.outbox_deliver``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from quotas.choices import SyncBackend, SyncState
from quotas.kube import compiler
from quotas.kube.applier import (
    ApplyError,
    ApplyResult,
    Backend,
    KubernetesBackend,
    ManifestsBackend,
    RetryableError,
    Scope,
    apply_objects,
)
from quotas.kube.load import cluster_spec, tenant_specs
from quotas.kube.spec import LABEL_TENANT
from quotas.kube.validate import validate_objects
from quotas.models import Cluster, QuotaSet, SyncOutbox, TenantSync
from tenants.models import Tenant
from tenants.services import audit_record

logger = logging.getLogger(__name__)


class NoBackend(ApplyError):
    """The cluster is set to keep quotas in the portal only, or has no way to reach it."""


def backend_for(cluster: Cluster) -> Backend:
    if cluster.backend == SyncBackend.MANIFESTS:
        if not cluster.manifests_dir:
            raise NoBackend(f"cluster {cluster.name} has no manifests directory set")
        return ManifestsBackend(cluster.manifests_dir)
    if cluster.backend == SyncBackend.KUBERNETES:
        if cluster.in_cluster:
            return KubernetesBackend.in_cluster()
        if not cluster.kubeconfig_path:
            raise NoBackend(f"cluster {cluster.name} has no kubeconfig path and is not in-cluster")
        try:
            return KubernetesBackend.from_kubeconfig(cluster.kubeconfig_path)
        except Exception as exc:  # a missing or broken kubeconfig file: say which
            raise NoBackend(f"cluster {cluster.name}: kubeconfig unusable: {exc}") from exc
    raise NoBackend(f"cluster {cluster.name} keeps quotas in the portal only (backend none)")


def _close(backend: Backend) -> None:
    close = getattr(backend, "close", None)
    if close is not None:
        close()


def desired_objects(cluster: Cluster, *, tenant: Tenant | None = None) -> list[dict[str, Any]]:
    """What the portal owns on ``cluster`` (for one tenant: its objects and the cluster-wide
    objects they need), compiled from the quotas in force."""
    spec = cluster_spec(cluster)
    if tenant is None:
        return compiler.compile_cluster(spec, tenant_specs(cluster))
    tenants = tenant_specs(cluster, tenant_ids=[tenant.pk])
    objects = list(compiler.compile_cluster_wide(spec, tenants))
    for t in tenants:
        objects.extend(compiler.compile_tenant(spec, t))
    return objects


@dataclass
class PushOutcome:
    generation: int  # the quota set generation the pass pushed
    result: ApplyResult | None = None
    error: str = ""
    retryable: bool = False
    drifted: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error and (self.result is None or not self.result.failed)

    @property
    def message(self) -> str:
        if self.error:
            return self.error
        if self.result and self.result.failed:
            return "; ".join(f"{key[1]} {key[3]}: {msg}" for key, msg in self.result.failed)
        return ""


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
    outcome = PushOutcome(generation=generation)
    if cluster.backend == SyncBackend.NONE:
        # Quotas kept in the portal only: the quota set in force is all there is to apply.
        if not dry_run:
            _record(tenant, cluster, outcome)
        return outcome
    try:
        desired = desired_objects(cluster, tenant=tenant)
        errors = validate_objects(desired, kubernetes_version=cluster.kubernetes_version)
        if errors:
            # The compiler made an object the cluster would refuse: nothing is sent, the last
            # good state stays in place.
            outcome.error = "invalid objects: " + "; ".join(errors[:5])
        else:
            backend = backend_for(cluster)
            try:
                outcome.result = apply_objects(
                    backend, desired, Scope(cluster.name, tenant=tenant.slug), dry_run=dry_run
                )
            finally:
                _close(backend)
    except RetryableError as exc:
        outcome.error, outcome.retryable = exc.message, True
    except ApplyError as exc:
        outcome.error = exc.message
    if not dry_run:
        _record(tenant, cluster, outcome)
    return outcome


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
        sync.message = (
            "kept in the portal only (backend none)" if cluster.backend == SyncBackend.NONE else ""
        )
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
    return sync


def cluster_reconcile(*, cluster: Cluster) -> PushOutcome:
    """A full pass over ``cluster``: re-apply what differs (hand edits), prune what the portal
    owns and no longer wants, and audit each repaired drift with its diff."""
    outcome = PushOutcome(generation=0)
    try:
        desired = desired_objects(cluster)
        errors = validate_objects(desired, kubernetes_version=cluster.kubernetes_version)
        if errors:
            outcome.error = "invalid objects: " + "; ".join(errors[:5])
            return outcome
        backend = backend_for(cluster)
        try:
            outcome.result = apply_objects(backend, desired, Scope(cluster.name))
        finally:
            _close(backend)
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
