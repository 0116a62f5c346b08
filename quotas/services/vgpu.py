"""vGPU quotas through HAMi (``quotas.vgpu``): what reads the database. GPU memory and
compute as typed and read, and the rules of one vGPU line, are in ``vgpu_amounts``
(``vgpu_amount_parse``, ``vgpu_line_problems``), which the rules module imports.

* ``cluster_hami_problem``: why a cluster cannot hold vGPU quotas ("" when it can).
* ``flavor_vgpu_convert``: an admin moves a time-sliced flavor to vGPU shares; every tenant's
  shares become the same fraction of the GPU's memory and compute, in one transaction,
  audited, pushed after commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

from django.db import transaction

from core.errors import ValidationFailed
from quotas import vgpu
from quotas.choices import GPU_RESOURCE, GPUCORES_RESOURCE, GPUMEM_RESOURCE, FlavorKind
from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor
from quotas.services.outbox import outbox_record
from quotas.services.quota_sets import cluster_lock, quota_set_lines, quota_set_store
from quotas.services.rules import QuotaItem, SchedulingQuotas
from quotas.services.vgpu_amounts import (
    HUNDRED,
)
from tenants.models import User
from tenants.services import audit_record


def cluster_hami_problem(cluster: Cluster) -> str:
    """Why ``cluster`` cannot hold vGPU quotas, in words ("" when its HAMi is new enough)."""
    problem = vgpu.hami_problem(cluster.hami_version)
    return f"{cluster.name}: {problem}" if problem else ""


# --- time-sliced -> vGPU ----------------------------------------------------------------------


@dataclass(frozen=True)
class ConvertedShare:
    """One tenant's time-sliced shares and what they became."""

    tenant: str
    shares_guaranteed: Decimal
    shares_limit: Decimal
    lines: tuple[QuotaItem, ...]
    rest: str  # what rounding down to whole MiB / whole percent left out, in words ("" none)


@dataclass(frozen=True)
class FlavorConversion:
    flavor: ResourceFlavor
    shares: tuple[ConvertedShare, ...]


def _fraction_lines(
    flavor: ResourceFlavor, guaranteed: Decimal, limit: Decimal, replicas: int, split: int
) -> tuple[list[QuotaItem], str]:
    """Shares of a GPU as vGPUs (at least one where the limit is above 0), GPU memory (whole
    MiB, rounded down) and compute (whole percent, rounded down), each the same fraction of a
    GPU; and what rounding the limit down left out, in words."""
    per_gpu = {
        GPU_RESOURCE: Decimal(split),
        GPUMEM_RESOURCE: Decimal(flavor.gpu_memory_mib or 0),  # MiB
        GPUCORES_RESOURCE: HUNDRED,
    }
    unit = {
        GPU_RESOURCE: Decimal(1),
        GPUMEM_RESOURCE: Decimal(vgpu.MIB),
        GPUCORES_RESOURCE: Decimal(1),
    }
    lines, rest = [], []
    for resource, amount in per_gpu.items():
        exact = [shares * amount / Decimal(replicas) for shares in (guaranteed, limit)]
        whole = [e.to_integral_value(rounding=ROUND_FLOOR) for e in exact]
        if resource == GPU_RESOURCE:
            whole[1] = max(whole[1], Decimal(1 if limit > 0 else 0))
        elif exact[1] != whole[1]:
            left = (exact[1] - whole[1]).quantize(Decimal("0.01")).normalize() + 0
            rest.append(
                f"{left:f} MiB of GPU memory"
                if resource == GPUMEM_RESOURCE
                else f"{left:f}% of a GPU"
            )
        lines.append(
            QuotaItem(flavor, resource, whole[0] * unit[resource], whole[1] * unit[resource])
        )
    return lines, "; ".join(rest)


def flavor_vgpu_convert(
    *,
    flavor: ResourceFlavor,
    gpu_memory_mib: int | None,
    actor: User | None,
    vgpu_split: int | None = None,
) -> FlavorConversion:
    """Move a time-sliced flavor to vGPU shares through HAMi. Each tenant's shares of it
    become the same fraction of one GPU's memory (whole MiB, rounded down, the rest noted in
    the audit row) and compute (whole percent), and vGPUs at the flavor's split; its capacity
    becomes GPUs x split vGPUs, GPUs x ``gpu_memory_mib`` and GPUs x 100%. One transaction,
    audited; every changed quota set is pushed after commit. Refused (400) without
    ``gpu_memory_mib``, on a flavor that is not time-sliced, or on a cluster without a new
    enough HAMi."""
    with transaction.atomic():
        return _convert(flavor, gpu_memory_mib, actor, vgpu_split)


def _convert_refusal(
    flavor: ResourceFlavor, gpu_memory_mib: int | None, vgpu_split: int | None
) -> None:
    replicas = flavor.time_slicing_replicas
    if flavor.kind != FlavorKind.GPU or not replicas:
        raise ValidationFailed.for_field(
            "flavor", f"{flavor.name} is not a time-sliced GPU flavor: nothing to move to vGPU"
        )
    if (
        isinstance(gpu_memory_mib, bool)
        or not isinstance(gpu_memory_mib, int)
        or gpu_memory_mib < 1
    ):
        raise ValidationFailed.for_field(
            "gpu_memory_mib",
            f"give the memory of one of {flavor.name}'s GPUs in whole MiB (a T4: 15360): "
            "the tenants' shares become that fraction of it",
        )
    if vgpu_split is not None and (isinstance(vgpu_split, bool) or not 1 <= vgpu_split <= 1000):
        raise ValidationFailed.for_field("vgpu_split", "vGPUs per GPU: a whole number 1..1000")
    problem = cluster_hami_problem(flavor.cluster)
    if problem:
        raise ValidationFailed.for_field(
            "flavor", f"{flavor.name} cannot move to vGPU shares: {problem}"
        )


def _convert(
    flavor: ResourceFlavor, gpu_memory_mib: int | None, actor: User | None, split: int | None
) -> FlavorConversion:
    flavor = ResourceFlavor.objects.select_for_update().select_related("cluster").get(pk=flavor.pk)
    _convert_refusal(flavor, gpu_memory_mib, split)
    replicas = int(flavor.time_slicing_replicas or 0)
    split = split or replicas
    cluster_lock(flavor.cluster)
    shares_capacity = (
        FlavorResource.objects.filter(flavor=flavor, resource=GPU_RESOURCE)
        .values_list("capacity", flat=True)
        .first()
    ) or Decimal(0)
    gpus = (shares_capacity / Decimal(replicas)).to_integral_value(rounding=ROUND_FLOOR)
    before = {"kind": flavor.kind, "time_slicing_replicas": replicas, "gpus": str(gpus)}
    flavor.kind = FlavorKind.VGPU
    flavor.time_slicing_replicas = None
    flavor.gpu_memory_mib = gpu_memory_mib
    flavor.vgpu_split = split
    flavor.gpu_weight = flavor.gpu_weight * Decimal(replicas) / Decimal(split)
    flavor.save()
    capacities: Mapping[str, Decimal] = {
        GPU_RESOURCE: gpus * split,
        GPUMEM_RESOURCE: gpus * Decimal(gpu_memory_mib or 0) * vgpu.MIB,
        GPUCORES_RESOURCE: gpus * HUNDRED,
    }
    for resource, capacity in capacities.items():
        FlavorResource.objects.update_or_create(
            flavor=flavor, resource=resource, defaults={"capacity": capacity}
        )
    converted = []
    set_ids = (
        Quota.objects.filter(flavor=flavor, resource=GPU_RESOURCE)
        .values_list("quota_set_id", flat=True)
        .distinct()
    )
    for quota_set in (
        QuotaSet.objects.select_for_update()
        .select_related("tenant", "cluster")
        .filter(pk__in=list(set_ids))
        .order_by("tenant__slug")
    ):
        converted.append(_convert_set(quota_set, flavor, replicas, split, actor))
    audit_record(
        actor=actor,
        action="flavor.moved_to_vgpu",
        obj=flavor,
        object_id=f"{flavor.name}@{flavor.cluster.name}",
        before=before,
        after={
            "kind": flavor.kind,
            "gpu_memory_mib": gpu_memory_mib,
            "vgpu_split": split,
            "capacity": {r: str(c) for r, c in capacities.items()},
            "tenants": {
                c.tenant: {
                    "shares": [str(c.shares_guaranteed), str(c.shares_limit)],
                    "lines": {i.resource: [str(i.guaranteed), str(i.limit)] for i in c.lines},
                    "rest": c.rest,
                }
                for c in converted
            },
        },
    )
    return FlavorConversion(flavor, tuple(converted))


def _convert_set(
    quota_set: QuotaSet, flavor: ResourceFlavor, replicas: int, split: int, actor: User | None
) -> ConvertedShare:
    current = quota_set_lines(quota_set)
    share = current[(flavor.pk, GPU_RESOURCE)]
    lines, rest = _fraction_lines(flavor, share.guaranteed, share.limit, replicas, split)
    # The flavor's other lines (CPU, memory) stay; its GPU shares give way to the vGPU lines.
    items = [
        QuotaItem(flavor if i.flavor.pk == flavor.pk else i.flavor, i.resource, i.guaranteed,
                  i.limit, i.lending_limit)
        for (flavor_id, resource), i in current.items()
        if not (flavor_id == flavor.pk and resource in (GPU_RESOURCE, *VGPU_ONLY))
    ]  # fmt: skip
    items.extend(lines)
    scheduling = SchedulingQuotas(
        **{name: getattr(quota_set, name) for name in SCHEDULING_NAMES},
    )
    reason = f"{flavor.name} moved from time-slicing to vGPU shares (HAMi)"
    if rest:
        reason += f"; rounded down: {rest}"
    quota_set_store(
        quota_set=quota_set,
        created=False,
        current=current,
        items=items,
        scheduling=scheduling,
        actor=actor,
        reason=reason,
    ).save()
    outbox_record(quota_set=quota_set)
    return ConvertedShare(quota_set.tenant.slug, share.guaranteed, share.limit, tuple(lines), rest)


VGPU_ONLY = (GPUMEM_RESOURCE, GPUCORES_RESOURCE)
SCHEDULING_NAMES = (
    "max_running_jobs", "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs",
    "fair_share_weight", "max_gpus_per_pod", "max_cpu_per_pod", "max_memory_per_pod",
    "inference_gpus",
)  # fmt: skip
