"""GPU memory and compute of a vGPU flavor (``quotas.vgpu``) as people type and read them:
GPU memory in GiB ("4.5", "4.5 GiB") or a Kubernetes quantity ("4608Mi"), stored in bytes and
held to whole MiB (HAMi counts MiB); compute as a percent of a GPU ("30%" or 30), whole points.
Reads nothing."""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from core.errors import ValidationFailed
from quotas import vgpu
from quotas.choices import GPU_RESOURCE, GPUCORES_RESOURCE, GPUMEM_RESOURCE, FlavorKind
from quotas.models import ResourceFlavor
from quotas.quantity import QuantityError, parse_resource_amount, to_display


class QuotaItem(Protocol):
    """A quota line as the rules read it (``quotas.services.rules.QuotaItem`` is one)."""

    @property
    def flavor(self) -> ResourceFlavor: ...

    @property
    def resource(self) -> str: ...

    @property
    def guaranteed(self) -> Decimal: ...

    @property
    def limit(self) -> Decimal: ...


HUNDRED = Decimal(100)
# "4.5", "4.5 GiB", "4.5GiB", "4.5 gib": GiB, as pages show GPU memory.
_GIB_TEXT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:gib)?\s*$", re.IGNORECASE)
_PERCENT_TEXT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")


def is_vgpu_flavor(flavor: ResourceFlavor) -> bool:
    return flavor.kind == FlavorKind.VGPU


def gpumem_words(amount: Decimal | int) -> str:
    """'4.5 GiB of GPU memory'."""
    return f"{to_display(amount, GPUMEM_RESOURCE)} of GPU memory"


def vgpu_amount_words(amount: Decimal | int, resource: str) -> str:
    """A vGPU line's amount as people read it: GiB of GPU memory, percent of a GPU, vGPUs."""
    if resource == GPUMEM_RESOURCE:
        return gpumem_words(amount)
    if resource == GPUCORES_RESOURCE:
        return to_display(amount, resource)
    count = Decimal(amount)
    return f"{to_display(count, resource)} {'vGPU' if count == 1 else 'vGPUs'}"


def _gpumem_parse(raw: Any) -> Decimal:
    text = str(raw)
    plain = _GIB_TEXT.match(text) if not isinstance(raw, int | Decimal) else None
    if plain:
        amount = Decimal(plain.group(1)) * vgpu.GIB
    else:
        amount = parse_resource_amount(GPUMEM_RESOURCE, raw)
    vgpu.whole_mib(amount)  # raises NotWholeMiB naming the nearest values
    return amount.to_integral_value()


def _gpucores_parse(raw: Any) -> Decimal:
    match = _PERCENT_TEXT.match(str(raw))
    if not match:
        raise QuantityError(f"{raw!r} is not a percent of a GPU, as in '30%' or 30")
    try:
        points = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the pattern holds digits only
        raise QuantityError(f"{raw!r} is not a percent of a GPU") from exc
    if points != points.to_integral_value():
        raise QuantityError(
            f"compute is counted in whole percent of a GPU (HAMi's nvidia.com/gpucores); "
            f"got {points.normalize():f}%"
        )
    return points.to_integral_value()


def vgpu_amount_parse(resource: str, raw: Any, *, field: str) -> Decimal:
    """An amount of a vGPU flavor's ``resource`` as typed: GPU memory in GiB (a bare number
    is GiB) or a Kubernetes quantity, whole MiB, in bytes; compute as a percent of a GPU,
    whole points; vGPUs as a whole number. Errors name ``field`` and the rule (400)."""
    try:
        if resource == GPUMEM_RESOURCE:
            return _gpumem_parse(raw)
        if resource == GPUCORES_RESOURCE:
            return _gpucores_parse(raw)
        return parse_resource_amount(resource, raw)
    except (QuantityError, vgpu.NotWholeMiB) as exc:
        raise ValidationFailed.for_field(field, f"{resource}: {exc}") from exc


def vgpu_line_problems(item: QuotaItem, vgpus: Decimal | None) -> dict[str, str]:
    """What is wrong with one line of a vGPU flavor, by attribute ("guaranteed", "limit"):
    GPU memory not whole MiB; and, where the tenant's vGPU limit on the flavor (``vgpus``) is
    known, memory or compute no set of its vGPUs could reach (each vGPU sits on one GPU: at
    most ``gpu_memory_mib`` and 100% of its compute). With one vGPU that is the rule per pod:
    no more memory than one GPU has, compute within 1..100%."""
    flavor = item.flavor
    found: dict[str, str] = {}
    if not is_vgpu_flavor(flavor):
        return found
    for attribute in ("guaranteed", "limit"):
        amount = getattr(item, attribute)
        if item.resource == GPUMEM_RESOURCE:
            try:
                vgpu.whole_mib(amount)
            except vgpu.NotWholeMiB as exc:
                found[attribute] = f"{item.resource} on {flavor.name}: {exc}"
                continue
        if item.resource == GPUCORES_RESOURCE and amount != amount.to_integral_value():
            found[attribute] = (
                f"{item.resource} on {flavor.name}: compute is counted in whole percent of a GPU"
            )
    if "limit" in found or vgpus is None or item.limit <= 0:
        return found
    if item.resource == GPUMEM_RESOURCE and flavor.gpu_memory_mib:
        most = vgpus * flavor.gpu_memory_mib * vgpu.MIB
        if item.limit > most:
            found["limit"] = (
                f"{item.resource} on {flavor.name}: {gpumem_words(item.limit)} is more than "
                f"{vgpu_amount_words(vgpus, GPU_RESOURCE)} can hold: each vGPU sits on one GPU "
                f"of {gpumem_words(flavor.gpu_memory_mib * vgpu.MIB)}, so at most "
                f"{gpumem_words(most)}"
            )
    if item.resource == GPUCORES_RESOURCE:
        most = vgpus * HUNDRED
        if item.limit > most:
            found["limit"] = (
                f"{item.resource} on {flavor.name}: {to_display(item.limit, item.resource)} is "
                f"outside 1..100% per vGPU: {vgpu_amount_words(vgpus, GPU_RESOURCE)} can use at "
                f"most {to_display(most, item.resource)}"
            )
    return found


def vgpu_lines_check(items: Sequence[QuotaItem]) -> dict[int, dict[str, str]]:
    """``vgpu_line_problems`` for each line of a tenant's whole quota set on a cluster, the
    vGPU limit read from the set's ``nvidia.com/gpu`` line on the same flavor (None: no such
    line, nothing to hold memory and compute to)."""
    vgpus = {
        item.flavor.pk: item.limit
        for item in items
        if item.resource == GPU_RESOURCE and is_vgpu_flavor(item.flavor)
    }
    out: dict[int, dict[str, str]] = {}
    for index, item in enumerate(items):
        problems = vgpu_line_problems(item, vgpus.get(item.flavor.pk))
        if problems:
            out[index] = problems
    return out
