"""Tier templates (named quota sizes) and quota sets made from them: a template checked and
saved, audited; a tier turned into items and written to a cluster."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction

from core.errors import ValidationFailed
from quotas import vgpu
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MEMORY_RESOURCE,
    FlavorKind,
)
from quotas.models import (
    Cluster,
    QuotaSet,
    ResourceFlavor,
    TierTemplate,
)
from quotas.quantity import QuantityError, format_quantity, parse_resource_amount
from quotas.services.quota_sets import quota_set_write
from quotas.services.rules import QuotaCheck, QuotaItem, SchedulingQuotas, amount_text
from quotas.vgpu import DEFAULT_SPLIT, MIB
from tenants.models import Tenant, User
from tenants.services import audit_record


def tier_items(*, tier: TierTemplate, gpu_flavor: ResourceFlavor) -> list[QuotaItem]:
    """The quota items a tier gives on a GPU flavor: GPUs, and CPU / memory where the flavor
    covers them. On a vGPU flavor (HAMi) a tier's GPUs are that many GPUs' worth: vGPUs at
    the flavor's split, their GPU memory and 100% of a GPU's compute each."""
    covered = set(gpu_flavor.resources.values_list("resource", flat=True))
    gpus = (Decimal(tier.gpus_guaranteed), Decimal(tier.gpus_limit))
    amounts = {
        GPU_RESOURCE: gpus,
        CPU_RESOURCE: (tier.cpu_guaranteed, tier.cpu_limit),
        MEMORY_RESOURCE: (tier.memory_guaranteed, tier.memory_limit),
    }
    if gpu_flavor.kind == FlavorKind.VGPU:
        split = Decimal(gpu_flavor.vgpu_split or DEFAULT_SPLIT)
        memory = Decimal(gpu_flavor.gpu_memory_mib or 0) * MIB
        amounts[GPU_RESOURCE] = (gpus[0] * split, gpus[1] * split)
        amounts[GPUMEM_RESOURCE] = (gpus[0] * memory, gpus[1] * memory)
        amounts[GPUCORES_RESOURCE] = (gpus[0] * 100, gpus[1] * 100)
    return [
        QuotaItem(gpu_flavor, resource, guaranteed, limit)
        for resource, (guaranteed, limit) in amounts.items()
        if resource in covered
    ]


def tier_scheduling(tier: TierTemplate) -> SchedulingQuotas:
    return SchedulingQuotas(
        max_running_jobs=tier.max_running_jobs,
        max_queued_jobs=tier.max_queued_jobs,
        max_pods=tier.max_pods,
        storage_bytes=tier.storage_bytes,
        max_pvcs=tier.max_pvcs,
        max_gpus_per_pod=tier.max_gpus_per_pod,
        max_cpu_per_pod=tier.max_cpu_per_pod,
        max_memory_per_pod=tier.max_memory_per_pod,
        inference_gpus=tier.inference_gpus,
    )


def default_gpu_flavor(*, cluster: Cluster) -> ResourceFlavor:
    flavor = cluster.flavors.filter(kind=FlavorKind.GPU).order_by("name").first()
    if flavor is None:
        raise ValidationFailed.for_field(
            "cluster", f"cluster {cluster.name!r} has no whole-GPU flavor to apply a tier to"
        )
    return flavor


def tier_flavor_check(gpu_flavor: ResourceFlavor) -> None:
    """A tier applies to whole GPUs, or to a vGPU flavor (HAMi) on a cluster whose HAMi can
    hold its quotas; 400 naming ``gpu_flavor`` otherwise."""
    if gpu_flavor.kind == FlavorKind.VGPU:
        problem = vgpu.hami_problem(gpu_flavor.cluster.hami_version)
        if problem:
            raise ValidationFailed.for_field(
                "gpu_flavor", f"{gpu_flavor.name} is a vGPU flavor and {problem}"
            )
        return
    if gpu_flavor.kind != FlavorKind.GPU:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} is a {gpu_flavor.kind} flavor, not whole GPUs",
        )


def quota_set_create_from_tier(
    *,
    tenant: Tenant,
    cluster: Cluster,
    tier: TierTemplate,
    actor: User | None,
    gpu_flavor: ResourceFlavor | None = None,
) -> QuotaSet:
    gpu_flavor = gpu_flavor or default_gpu_flavor(cluster=cluster)
    if gpu_flavor.cluster_id != cluster.pk:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} belongs to cluster {gpu_flavor.cluster.name!r}, "
            f"not {cluster.name!r}",
        )
    tier_flavor_check(gpu_flavor)
    try:
        return quota_set_write(
            tenant=tenant,
            cluster=cluster,
            items=tier_items(tier=tier, gpu_flavor=gpu_flavor),
            scheduling=tier_scheduling(tier),
            actor=actor,
            tier=tier,
            reason=f"tier {tier.name}",
        )
    except ValidationFailed as exc:
        # The caller chose a tier, not items: name the tier and keep every reason.
        reasons = [message for messages in exc.fields.values() for message in messages]
        raise ValidationFailed(
            f"tier {tier.name!r} does not fit on {cluster.name}: {exc.message}",
            fields={"tier": reasons},
        ) from exc


TIER_AMOUNT_FIELDS = {
    "gpus_guaranteed": GPU_RESOURCE,
    "gpus_limit": GPU_RESOURCE,
    "cpu_guaranteed": CPU_RESOURCE,
    "cpu_limit": CPU_RESOURCE,
    "memory_guaranteed": MEMORY_RESOURCE,
    "memory_limit": MEMORY_RESOURCE,
    "storage_bytes": "storage",
}
TIER_COUNT_FIELDS = ("max_running_jobs", "max_queued_jobs", "max_pods", "max_pvcs")
TIER_TEXT_FIELDS = ("display_name", "description", "sort_order")
# Optional: per-pod caps (R16) and the inference split (R17); empty: derived / no split.
TIER_OPTIONAL_FIELDS = {
    "max_gpus_per_pod": GPU_RESOURCE,
    "max_cpu_per_pod": CPU_RESOURCE,
    "max_memory_per_pod": MEMORY_RESOURCE,
    "inference_gpus": GPU_RESOURCE,
}


def _tier_snapshot(tier: TierTemplate) -> dict[str, Any]:
    snapshot: dict[str, Any] = {"name": tier.name, "display_name": tier.display_name}
    for name, resource in TIER_AMOUNT_FIELDS.items():
        snapshot[name] = format_quantity(getattr(tier, name), resource)
    snapshot.update({name: getattr(tier, name) for name in TIER_COUNT_FIELDS})
    for name, resource in TIER_OPTIONAL_FIELDS.items():
        value = getattr(tier, name)
        snapshot[name] = None if value is None else format_quantity(Decimal(value), resource)
    return snapshot


def tier_template_prepare(*, tier: TierTemplate | None = None, **fields: Any) -> TierTemplate:
    """The tier with ``fields`` applied and checked, unsaved; ``tier`` None makes a new one.
    Amounts may be Kubernetes quantities ("64Gi") or numbers. The rules: guaranteed <= limit
    for GPUs, CPU and memory, nothing negative, GPUs whole, a DNS-1123 name that is free.
    Raises ValidationFailed naming every field that breaks one."""
    unknown = set(fields) - {
        "name", *TIER_AMOUNT_FIELDS, *TIER_COUNT_FIELDS, *TIER_TEXT_FIELDS, *TIER_OPTIONAL_FIELDS
    }  # fmt: skip
    if unknown:
        raise ValidationFailed.for_field(sorted(unknown)[0], "not a tier template field")
    if tier is None:
        name = fields.get("name", "")
        if TierTemplate.objects.filter(name=name).exists():
            raise ValidationFailed.for_field("name", f"A tier template {name!r} already exists.")
        tier = TierTemplate(name=name)
    elif "name" in fields and fields["name"] != tier.name:
        raise ValidationFailed.for_field("name", "A tier template's name cannot change.")
    else:
        tier = TierTemplate.objects.get(pk=tier.pk)  # never half-apply to the caller's object
    for name, value in fields.items():
        setattr(tier, name, value)
    check = QuotaCheck()
    for name, resource in TIER_AMOUNT_FIELDS.items():
        value = getattr(tier, name, None)
        if value is None or value == "":
            check.error(name, "This field is required.")
            continue
        try:
            setattr(tier, name, parse_resource_amount(resource, value))
        except QuantityError as exc:
            check.error(name, str(exc))
    for name in TIER_COUNT_FIELDS:
        value = getattr(tier, name, None)
        if value is None or not isinstance(value, int) or value < 0:
            check.error(name, f"must be a whole number >= 0, got {value!r}")
    for what in ("gpus", "cpu", "memory"):
        names = (f"{what}_guaranteed", f"{what}_limit")
        if any(name in check.errors for name in names):
            continue
        guaranteed, limit = (getattr(tier, name) for name in names)
        if guaranteed > limit:
            resource = TIER_AMOUNT_FIELDS[names[1]]
            check.error(
                names[0],
                f"guaranteed {format_quantity(guaranteed, resource)} is above the limit "
                f"{format_quantity(limit, resource)}",
            )
    _tier_optional_check(check, tier)
    check.raise_if_invalid()
    try:
        tier.full_clean(
            exclude=[*TIER_AMOUNT_FIELDS, *TIER_COUNT_FIELDS, *TIER_OPTIONAL_FIELDS],
            validate_unique=False,
        )
    except DjangoValidationError as exc:
        errors = {name: [str(m) for m in messages] for name, messages in exc.message_dict.items()}
        raise ValidationFailed(next(iter(errors.values()))[0], fields=errors) from exc
    return tier


def _tier_optional_check(check: QuotaCheck, tier: TierTemplate) -> None:
    """The tier's per-pod caps and inference split, parsed in place: each empty or above zero
    (the split may be 0), whole GPUs, and none above the tier's own limit."""
    limits = {
        GPU_RESOURCE: getattr(tier, "gpus_limit", None),
        CPU_RESOURCE: getattr(tier, "cpu_limit", None),
        MEMORY_RESOURCE: getattr(tier, "memory_limit", None),
    }
    for name, resource in TIER_OPTIONAL_FIELDS.items():
        value = getattr(tier, name, None)
        if value is None or value == "":
            setattr(tier, name, None)
            continue
        try:
            amount = parse_resource_amount(resource, value)
        except QuantityError as exc:
            check.error(name, str(exc))
            continue
        if amount <= 0 and name != "inference_gpus":
            check.error(
                name, f"a per-pod cap must be above zero; got {amount_text(amount, resource)}"
            )
            continue
        limit = limits[resource]
        if isinstance(limit, Decimal | int) and amount > limit:
            what = "for inference" if name == "inference_gpus" else "per pod"
            check.error(
                name,
                f"{amount_text(amount, resource)} {what} is above the tier's limit of "
                f"{amount_text(Decimal(limit), resource)}",
            )
        setattr(tier, name, int(amount) if resource == GPU_RESOURCE else amount)


@transaction.atomic
def tier_template_save(
    *, actor: User | None, tier: TierTemplate | None = None, **fields: Any
) -> TierTemplate:
    """Create a tier template (``tier`` None) or change the given fields of one, audited.
    Quota sets already made from the tier keep their numbers: a tier is a template."""
    before = None if tier is None else _tier_snapshot(TierTemplate.objects.get(pk=tier.pk))
    prepared = tier_template_prepare(tier=tier, **fields)
    prepared.save()
    audit_record(
        actor=actor,
        action="tier_template.created" if tier is None else "tier_template.updated",
        obj=prepared,
        before=before,
        after=_tier_snapshot(prepared),
    )
    return prepared
