"""Isolation probes (R30): asked for, handed to the agent and recorded. An admin asks for a
probe of one GPU; the node's agent learns of it from its report's answer (``probes``),
fetches it (``GET agent/probes/``), runs it and posts the outcome (``POST
agent/probes/{id}/result/``).

The probe runs a compute-bound kernel on the target alone, then beside a saturating neighbour
(a second MIG instance, or a second process on a GPU without MIG); the slowdown is
``(t_together / t_alone - 1) * 100``, computed here from the two times the agent measured.
More than ``ISOLATION_SLOWDOWN_LIMIT_PCT`` (5 %) fails R30.

A probe is about two tenants where the fleet knows them: tenant A's share is saturated while
tenant B's is probed. On a MIG GPU the shares are GPU instances and their tenants the ones
whose pods run there (``MigInstance.tenant``); on a GPU without MIG they are time slices, held
by the tenants with quota on a time-sliced flavor of the GPU's model on its cluster. An admin
may name either tenant (or both); the instances follow. ``isolation_pairs`` lists the latest
result per pair of tenants.

Keyword-only, atomic, audited, race-safe transitions; the two reads the probe endpoints need
(``probe_list``, ``agent_probes``) live here beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from gpu_agent.conf import layout_deadline
from gpu_agent.models import (
    OPEN_PROBE_STATES,
    Gpu,
    IsolationProbe,
    MigInstance,
    Node,
    ProbeState,
)
from gpu_agent.selectors import _same_model, node_is_stale
from gpu_agent.services.common import MESSAGE_MAX
from quotas.choices import GPUCORES_RESOURCE, GPUMEM_RESOURCE, FlavorKind
from quotas.models import Quota
from quotas.vgpu import MIB
from tenants.models import Tenant, User
from tenants.services import audit_record

PROBE_HISTORY = 20
MAX_PROBE_SECONDS = 3600.0
# The states an agent may post, and from which states each is accepted.
RESULT_TRANSITIONS: dict[str, tuple[str, ...]] = {
    ProbeState.RUNNING: (ProbeState.REQUESTED,),
    ProbeState.DONE: OPEN_PROBE_STATES,
    ProbeState.SKIPPED: OPEN_PROBE_STATES,
    ProbeState.FAILED: OPEN_PROBE_STATES,
}


def _label(instance: MigInstance) -> str:
    return f"GPU instance {instance.gi_id} ({instance.profile} at slice {instance.start})"


def _pick_instances(
    gpu: Gpu, target_gi_id: int | None, neighbour_gi_id: int | None
) -> tuple[MigInstance, MigInstance]:
    """The two instances to probe: the ones named, else the first two idle ones (a busy
    instance only when there are not two idle ones), by start."""
    instances = list(gpu.instances.order_by("start"))
    if len(instances) < 2:
        have = "no instance" if not instances else f"only {_label(instances[0])}"
        raise ValidationFailed.for_field(
            "gpu",
            f"GPU {gpu.uuid} is in MIG mode with {have}; a probe needs two GPU instances, one "
            "probed and one saturating neighbour. Give it a layout with two instances first.",
        )
    by_id = {i.gi_id: i for i in instances}
    for field_name, gi_id in (
        ("target_gi_id", target_gi_id),
        ("neighbour_gi_id", neighbour_gi_id),
    ):
        if gi_id is not None and gi_id not in by_id:
            raise ValidationFailed.for_field(
                field_name,
                f"GPU {gpu.uuid} has no GPU instance {gi_id}; it has "
                + ", ".join(_label(i) for i in instances)
                + ".",
            )
    if target_gi_id is not None and target_gi_id == neighbour_gi_id:
        raise ValidationFailed.for_field(
            "neighbour_gi_id", "The neighbour must be another GPU instance than the target."
        )
    ranked = sorted(instances, key=lambda i: (i.busy, i.start))
    target = (
        by_id[target_gi_id]
        if target_gi_id is not None
        else next(i for i in ranked if i.gi_id != neighbour_gi_id)
    )
    neighbour = (
        by_id[neighbour_gi_id]
        if neighbour_gi_id is not None
        else next(i for i in ranked if i.gi_id != target.gi_id)
    )
    return target, neighbour


def time_slice_tenants(*, gpu: Gpu) -> list[Tenant]:
    """Tenants holding shares of ``gpu`` without MIG: quota above 0 on a time-sliced or vGPU
    (HAMi) flavor of its model on its node's cluster, by slug. One query (and the
    catalogue)."""
    cluster_id = gpu.node.cluster_id
    if cluster_id is None:
        return []
    quotas = (
        Quota.objects.filter(
            Q(flavor__time_slicing_replicas__isnull=False) | Q(flavor__kind=FlavorKind.VGPU),
            quota_set__cluster_id=cluster_id,
            limit__gt=0,
        )
        .select_related("quota_set__tenant", "flavor")
        .order_by("quota_set__tenant__slug")
    )
    found: dict[int, Tenant] = {}
    for quota in quotas:
        if _same_model(quota.flavor.gpu_model, gpu.name):
            found.setdefault(quota.quota_set.tenant_id, quota.quota_set.tenant)
    return list(found.values())


def vgpu_limits(
    *, gpu: Gpu, target: Tenant | None, neighbour: Tenant | None
) -> dict[str, int | None] | None:
    """On a GPU of a vGPU (HAMi) flavor's model on its cluster: the compute (percent of the
    GPU, at most 100) and GPU memory (MiB, at most the GPU's) each tenant's share holds it to,
    its ``nvidia.com/gpucores`` and ``nvidia.com/gpumem`` limits there (None where it has
    none); None where the GPU is no vGPU flavor's. One query."""
    cluster_id = gpu.node.cluster_id
    if cluster_id is None or gpu.mig_mode_current:
        return None
    quotas = [
        q
        for q in Quota.objects.filter(
            quota_set__cluster_id=cluster_id, flavor__kind=FlavorKind.VGPU
        ).select_related("flavor", "quota_set")
        if _same_model(q.flavor.gpu_model, gpu.name)
    ]
    if not quotas:
        return None
    out: dict[str, int | None] = {}
    for side, tenant in (("target", target), ("neighbour", neighbour)):
        limits = {
            q.resource: q.limit
            for q in quotas
            if tenant is not None and q.quota_set.tenant_id == tenant.pk
        }
        cores = limits.get(GPUCORES_RESOURCE)
        memory = limits.get(GPUMEM_RESOURCE)
        out[f"{side}_cores_pct"] = None if not cores else int(min(cores, Decimal(100)))
        out[f"{side}_memory_mib"] = (
            None if not memory else min(int(memory // MIB), gpu.memory_total_mib or 2**31 - 1)
        )
    return out


def probe_tenants(*, gpu: Gpu) -> list[Tenant]:
    """The tenants a probe of ``gpu`` can be about: the owners of its MIG instances, or the
    holders of its time slices (the GPU page's choices)."""
    if gpu.mig_mode_current:
        owners: dict[int, Tenant] = {}
        for instance in gpu.instances.select_related("tenant").order_by("start"):
            if instance.tenant is not None:
                owners.setdefault(instance.tenant_id, instance.tenant)  # type: ignore[arg-type]
        return sorted(owners.values(), key=lambda t: t.slug)
    return time_slice_tenants(gpu=gpu)


def _names(tenants: Sequence[Tenant]) -> str:
    return ", ".join(t.slug for t in tenants) or "none"


def _check_pair(target: Tenant | None, neighbour: Tenant | None) -> None:
    if target is not None and neighbour is not None and target.pk == neighbour.pk:
        raise ValidationFailed.for_field(
            "neighbour_tenant",
            f"The saturating tenant must be another tenant than the probed one ({target.slug}): "
            "the check measures one tenant's slowdown caused by another.",
        )


def _pick_owned(
    gpu: Gpu,
    target_gi_id: int | None,
    neighbour_gi_id: int | None,
    target_tenant: Tenant | None,
    neighbour_tenant: Tenant | None,
) -> tuple[MigInstance, MigInstance]:
    """The two instances when a tenant is named, or when none is and the instances belong
    to two tenants: the first instance (by start) of each. Else ``_pick_instances``."""
    instances = list(gpu.instances.select_related("tenant").order_by("start"))
    owners = sorted(
        {i.tenant_id: i.tenant for i in instances if i.tenant is not None}.values(),
        key=lambda t: t.slug,
    )
    if target_tenant is None and neighbour_tenant is None:
        if len(owners) < 2 or target_gi_id is not None or neighbour_gi_id is not None:
            return _pick_instances(gpu, target_gi_id, neighbour_gi_id)
        target_tenant, neighbour_tenant = owners[1], owners[0]

    def owned(field_name: str, tenant: Tenant | None, gi_id: int | None) -> MigInstance | None:
        if tenant is None:
            return None
        mine = [i for i in instances if i.tenant_id == tenant.pk]
        if gi_id is not None:
            mine = [i for i in mine if i.gi_id == gi_id]
        if not mine:
            owner_words = f"tenants running on its instances: {_names(owners)}"
            raise ValidationFailed.for_field(
                field_name,
                f"GPU instance {gi_id} of GPU {gpu.uuid} is not {tenant.slug}'s; {owner_words}."
                if gi_id is not None
                else f"{tenant.slug} runs on no GPU instance of GPU {gpu.uuid}; {owner_words}.",
            )
        return mine[0]

    target = owned("target_tenant", target_tenant, target_gi_id)
    neighbour = owned("neighbour_tenant", neighbour_tenant, neighbour_gi_id)
    if target is None or neighbour is None:
        # One tenant named: the other share is another tenant's instance (the first by
        # start), else the first idle instance nobody's pod runs on, else any other.
        chosen = target or neighbour
        assert chosen is not None
        rest = sorted(
            (i for i in instances if i.gi_id != chosen.gi_id and i.tenant_id != chosen.tenant_id),
            key=lambda i: (i.tenant_id is None, i.busy, i.start),
        )
        if not rest:
            field_name = "neighbour_tenant" if target is not None else "target_tenant"
            raise ValidationFailed.for_field(
                field_name,
                f"GPU {gpu.uuid} has no GPU instance of another tenant than "
                f"{chosen.tenant.slug if chosen.tenant else 'the one named'} to pair with.",
            )
        other = rest[0]
        target, neighbour = (target, other) if target is not None else (other, neighbour)
    assert target is not None and neighbour is not None
    return target, neighbour


@transaction.atomic
def probe_request(
    *,
    gpu: Gpu,
    actor: User,
    target_gi_id: int | None = None,
    neighbour_gi_id: int | None = None,
    target_tenant: Tenant | None = None,
    neighbour_tenant: Tenant | None = None,
) -> IsolationProbe:
    """Ask the GPU's agent for an isolation probe: tenant A's share (``neighbour_tenant``)
    saturated while tenant B's (``target_tenant``) is probed. 400 for a MIG GPU with fewer
    than two instances (or instances it does not have), a named tenant with no share of the
    GPU, or the same tenant twice; 409 when the node is stale or a probe of the GPU is still
    open."""
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu.pk)
    _check_pair(target_tenant, neighbour_tenant)
    if node_is_stale(gpu.node):
        raise Conflict(
            f"Node {gpu.node.name} is stale (no report since "
            f"{gpu.node.last_report_at or 'it registered'}): its agent would not run the probe."
        )
    open_probe = gpu.probes.filter(state__in=OPEN_PROBE_STATES).first()
    if open_probe is not None:
        raise Conflict(
            f"Probe {open_probe.pk} of GPU {gpu.uuid} is still {open_probe.state}; "
            "wait for its result."
        )
    fields: dict[str, object] = {"mig": gpu.mig_mode_current}
    tenants: tuple[Tenant | None, Tenant | None] = (None, None)
    if gpu.mig_mode_current:
        target, neighbour = _pick_owned(
            gpu, target_gi_id, neighbour_gi_id, target_tenant, neighbour_tenant
        )
        fields |= {
            "target_gi_id": target.gi_id,
            "neighbour_gi_id": neighbour.gi_id,
            "target_profile": target.profile,
            "neighbour_profile": neighbour.profile,
        }
        tenants = (target.tenant, neighbour.tenant)
    elif target_gi_id is not None or neighbour_gi_id is not None:
        name = "target_gi_id" if target_gi_id is not None else "neighbour_gi_id"
        raise ValidationFailed.for_field(
            name,
            f"GPU {gpu.uuid} is not in MIG mode: the probe runs two processes on the whole "
            "GPU; leave the instances out.",
        )
    else:
        tenants = _pick_time_slices(gpu, target_tenant, neighbour_tenant)
        fields["vgpu_limits"] = vgpu_limits(gpu=gpu, target=tenants[0], neighbour=tenants[1])
    target_owner, neighbour_owner = tenants
    if (
        target_owner is not None
        and neighbour_owner is not None
        and target_owner.pk == neighbour_owner.pk
    ):
        neighbour_owner = None  # two instances of one tenant: not a pair of tenants
    fields |= {"target_tenant": target_owner, "neighbour_tenant": neighbour_owner}
    probe = IsolationProbe.objects.create(gpu=gpu, requested_by=actor, **fields)
    audit_record(
        actor=actor,
        action="isolation_probe.requested",
        obj=probe,
        object_id=f"{gpu.uuid}#{probe.pk}",
        after={
            "node": gpu.node.name,
            **{k: v for k, v in fields.items() if not k.endswith("_tenant")},
            "target_tenant": target_owner.slug if target_owner else None,
            "neighbour_tenant": neighbour_owner.slug if neighbour_owner else None,
        },
    )
    return probe


def _pick_time_slices(
    gpu: Gpu, target_tenant: Tenant | None, neighbour_tenant: Tenant | None
) -> tuple[Tenant | None, Tenant | None]:
    """On a GPU without MIG: the two tenants whose time slices the two processes stand for;
    named ones must hold a share of the GPU's model on its cluster. With none named, the
    first two holders (by slug) when there are two, else no tenant."""
    holders = time_slice_tenants(gpu=gpu)
    cluster = gpu.node.cluster.name if gpu.node.cluster_id else "no cluster"  # type: ignore[union-attr]
    for field_name, tenant in (
        ("target_tenant", target_tenant),
        ("neighbour_tenant", neighbour_tenant),
    ):
        if tenant is not None and tenant.pk not in {h.pk for h in holders}:
            raise ValidationFailed.for_field(
                field_name,
                f"{tenant.slug} holds no share of {gpu.name} GPUs on {cluster} "
                f"(quota on a time-sliced or vGPU flavor of that model); tenants that do: "
                f"{_names(holders)}.",
            )
    if target_tenant is None and neighbour_tenant is None:
        return (holders[1], holders[0]) if len(holders) >= 2 else (None, None)
    chosen = target_tenant or neighbour_tenant
    others = [h for h in holders if chosen is None or h.pk != chosen.pk]
    if target_tenant is None:
        target_tenant = others[0] if others else None
    if neighbour_tenant is None:
        neighbour_tenant = others[0] if others else None
    return target_tenant, neighbour_tenant


def probe_list(*, gpu: Gpu, limit: int = PROBE_HISTORY) -> list[IsolationProbe]:
    """The GPU's latest probes, newest first (the caller got ``gpu`` through ``gpu_get``,
    which answers 404 to anyone but platform admins)."""
    return list(
        IsolationProbe.objects.filter(gpu=gpu)
        .select_related("requested_by")
        .order_by("-requested_at", "-pk")[:limit]
    )


def probe_tenant_named(*, field: str, slug: str | None) -> Tenant | None:
    """The tenant a probe request names in ``field`` (None when not named); 400 naming the
    field for an unknown slug."""
    if not slug:
        return None
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise ValidationFailed.for_field(field, f"There is no tenant {slug!r}.")
    return tenant


PAIR_HISTORY = 2000  # the latest probes about two tenants the pairs are read from


@dataclass(frozen=True)
class IsolationPair:
    """The isolation check of one pair of tenants: ``saturating`` (tenant A) slowing down
    ``probed`` (tenant B). ``latest``: the newest finished probe (else the newest one)."""

    saturating: Tenant
    probed: Tenant
    latest: IsolationProbe
    probes: int
    failed: int  # finished probes over the 5 % line

    @property
    def passed(self) -> bool | None:
        return self.latest.passed


def isolation_pairs(*, limit: int = PAIR_HISTORY) -> list[IsolationPair]:
    """Per pair of tenants (saturating, probed), its latest probe, by the two slugs. Platform
    admins only (the caller checks). One query."""
    probes = list(
        IsolationProbe.objects.filter(target_tenant__isnull=False, neighbour_tenant__isnull=False)
        .select_related("gpu__node", "target_tenant", "neighbour_tenant", "requested_by")
        .order_by("-requested_at", "-pk")[:limit]
    )
    grouped: dict[tuple[int, int], list[IsolationProbe]] = {}
    for probe in probes:
        key = (probe.neighbour_tenant_id, probe.target_tenant_id)
        grouped.setdefault(key, []).append(probe)  # type: ignore[arg-type]
    pairs = []
    for group in grouped.values():
        done = [p for p in group if p.state == ProbeState.DONE]
        latest = done[0] if done else group[0]
        assert latest.neighbour_tenant is not None and latest.target_tenant is not None
        pairs.append(
            IsolationPair(
                saturating=latest.neighbour_tenant,
                probed=latest.target_tenant,
                latest=latest,
                probes=len(group),
                failed=sum(1 for p in done if p.passed is False),
            )
        )
    return sorted(pairs, key=lambda pair: (pair.saturating.slug, pair.probed.slug))


@dataclass(frozen=True)
class SharedGpu:
    """A GPU whose shares two tenants or more hold: ``how`` is ``"mig"`` (its MIG instances run
    their pods), ``"time-sliced"`` (they hold quota on a time-sliced flavor of its model) or
    ``"vgpu"`` (on a vGPU flavor of its model, shared through HAMi)."""

    gpu: Gpu
    tenants: list[Tenant]
    how: str


def shared_gpus(*, limit: int = 200) -> list[SharedGpu]:
    """The GPUs an isolation check between two tenants can run on, by node and index: MIG GPUs
    whose instances two tenants own, and GPUs without MIG of a time-sliced flavor's model that
    two tenants hold shares of on the node's cluster. Three queries, none per GPU."""
    found: list[SharedGpu] = []
    owners: dict[int, dict[int, Tenant]] = {}
    instances = MigInstance.objects.filter(
        tenant__isnull=False, gpu__mig_mode_current=True
    ).select_related("tenant")
    for instance in instances:
        assert instance.tenant is not None
        owners.setdefault(instance.gpu_id, {}).setdefault(instance.tenant_id, instance.tenant)  # type: ignore[arg-type]
    mig_ids = [gpu_id for gpu_id, tenants in owners.items() if len(tenants) >= 2]
    holders: dict[tuple[int, str], dict[int, Tenant]] = {}
    hows: dict[tuple[int, str], str] = {}
    quotas = Quota.objects.filter(
        Q(flavor__time_slicing_replicas__isnull=False) | Q(flavor__kind=FlavorKind.VGPU),
        limit__gt=0,
    ).select_related("quota_set__tenant", "flavor")
    for quota in quotas:
        key = (quota.quota_set.cluster_id, quota.flavor.gpu_model)
        hows[key] = "vgpu" if quota.flavor.kind == FlavorKind.VGPU else "time-sliced"
        holders.setdefault(key, {}).setdefault(quota.quota_set.tenant_id, quota.quota_set.tenant)
    shared_models = {key: tenants for key, tenants in holders.items() if len(tenants) >= 2}
    clusters = {cluster_id for cluster_id, _model in shared_models}
    gpus = (
        Gpu.objects.filter(
            Q(pk__in=mig_ids) | Q(mig_mode_current=False, node__cluster_id__in=clusters)
        )
        .select_related("node")
        .order_by("node__name", "index")
    )
    for gpu in gpus:
        if len(found) >= limit:
            break
        if gpu.pk in mig_ids:
            by_slug = sorted(owners[gpu.pk].values(), key=lambda t: t.slug)
            found.append(SharedGpu(gpu, by_slug, "mig"))
            continue
        for (cluster_id, model), holding in shared_models.items():
            if cluster_id == gpu.node.cluster_id and _same_model(model, gpu.name):
                ordered = sorted(holding.values(), key=lambda t: t.slug)
                found.append(SharedGpu(gpu, ordered, hows[(cluster_id, model)]))
                break
    return found


def agent_probes(*, node: Node) -> list[IsolationProbe]:
    """The node's open probes, oldest first."""
    return list(
        IsolationProbe.objects.filter(gpu__node=node, state__in=OPEN_PROBE_STATES)
        .select_related("gpu")
        .order_by("requested_at", "pk")
    )


@dataclass(frozen=True)
class ProbeOutcome:
    id: int
    accepted: bool
    state: str
    slowdown_pct: float | None
    detail: str


def _check_times(t_alone_s: float | None, t_together_s: float | None) -> None:
    for name, value in (("t_alone_s", t_alone_s), ("t_together_s", t_together_s)):
        if value is None:
            raise ValidationFailed.for_field(name, "A done probe needs both times.")
        if not 0 < value <= MAX_PROBE_SECONDS:
            raise ValidationFailed.for_field(
                name, f"{value} is not a duration in seconds (0 < t <= {MAX_PROBE_SECONDS:g})."
            )


@transaction.atomic
def agent_probe_result(
    *,
    node: Node,
    probe_id: int,
    state: str,
    t_alone_s: float | None = None,
    t_together_s: float | None = None,
    simulated: bool = False,
    library: str = "",
    message: str = "",
) -> ProbeOutcome:
    """Record what the agent found. 404 for an unknown probe, 403 for another node's; a
    result for a finished probe (or ``running`` twice) is ignored (``accepted`` false)."""
    if state not in RESULT_TRANSITIONS:
        raise ValidationFailed.for_field(
            "state", f"{state!r} is not one of {sorted(str(s) for s in RESULT_TRANSITIONS)}."
        )
    if len(message) > MESSAGE_MAX:
        raise ValidationFailed.for_field("message", f"At most {MESSAGE_MAX} characters.")
    if state == ProbeState.DONE:
        _check_times(t_alone_s, t_together_s)
    probe = (
        IsolationProbe.objects.select_for_update(of=("self",))
        .select_related("gpu")
        .filter(pk=probe_id)
        .first()
    )
    if probe is None:
        raise NotFound(f"No probe {probe_id}.", fields={"id": ["unknown probe"]})
    if probe.gpu.node_id != node.pk:
        raise PermissionDenied(
            "A node may only report the probes of its own GPUs.",
            fields={"id": [f"probe {probe_id} is of a GPU of another node"]},
        )
    if probe.state not in RESULT_TRANSITIONS[state]:
        return ProbeOutcome(
            probe.pk, False, probe.state, probe.slowdown_pct, f"probe is {probe.state}; ignored"
        )
    now = timezone.now()
    before = {"state": probe.state}
    probe.state = state
    probe.message = message
    probe.simulated = simulated
    probe.library = library[:40]
    if state == ProbeState.RUNNING or probe.started_at is None:
        probe.started_at = now
    if state != ProbeState.RUNNING:
        probe.finished_at = now
    if state == ProbeState.DONE:
        assert t_alone_s is not None and t_together_s is not None  # _check_times
        probe.t_alone_s, probe.t_together_s = t_alone_s, t_together_s
        probe.slowdown_pct = round((t_together_s / t_alone_s - 1) * 100, 2)
    probe.save()
    audit_record(
        actor=None,
        action=f"isolation_probe.{state}",
        obj=probe,
        object_id=f"{probe.gpu.uuid}#{probe.pk}",
        before=before,
        after={
            "state": state,
            "slowdown_pct": probe.slowdown_pct,
            "simulated": simulated,
            "message": message,
            "node": node.name,
        },
    )
    return ProbeOutcome(probe.pk, True, probe.state, probe.slowdown_pct, "recorded")


@transaction.atomic
def probes_fail_overdue(*, now: datetime | None = None) -> list[int]:
    """Open probes older than the layout deadline fail with the reason. Idempotent."""
    now = now or timezone.now()
    cutoff = now - layout_deadline()
    overdue: Sequence[IsolationProbe] = list(
        IsolationProbe.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state__in=OPEN_PROBE_STATES, requested_at__lt=cutoff)
        .select_related("gpu__node")
    )
    failed = []
    for probe in overdue:
        reason = (
            f"no result from node {probe.gpu.node.name} within "
            f"{round(layout_deadline().total_seconds() / 60)} minutes"
        )
        if IsolationProbe.objects.filter(pk=probe.pk, state__in=OPEN_PROBE_STATES).update(
            state=ProbeState.FAILED, message=reason, finished_at=now
        ):
            audit_record(
                actor=None,
                action="isolation_probe.failed",
                obj=probe,
                object_id=f"{probe.gpu.uuid}#{probe.pk}",
                before={"state": probe.state},
                after={"state": ProbeState.FAILED, "message": reason},
            )
            failed.append(probe.pk)
    return failed
