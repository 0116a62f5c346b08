from __future__ import annotations

from decimal import Decimal

from django import template

from quotas.choices import GPU_RESOURCE, GPUMEM_RESOURCE, MIG_RESOURCE_PREFIX
from quotas.quantity import counted_text, format_quantity, to_display
from quotas.timeslicing import (
    MEMORY_NOT_ISOLATED,
    VGPU_CAPS,
    gpus_text,
    percent_text,
    shares_text,
)

register = template.Library()


@register.filter
def quantity(amount: Decimal | None, resource: str) -> str:
    """``{{ item.limit|quantity:item.resource }}`` -> "64 GiB", "16", "0.5 cores"."""
    if amount is None:
        return "—"
    return to_display(amount, resource)


@register.filter
def quantity_change(amount: Decimal | None, resource: str) -> str:
    """A change of an amount for people, signed: "+2", "-512 MiB", "+1.25 TiB", "±0"."""
    if amount is None:
        return "—"
    if not amount:
        return "±0"
    text = to_display(abs(amount), resource)
    return f"-{text}" if amount < 0 else f"+{text}"


@register.filter
def counted(count: int | Decimal, word: str) -> str:
    """``{{ n|counted:"GPU" }}`` -> "1 GPU", "2 GPUs"."""
    return counted_text(count, word)


@register.filter
def k8s_quantity(amount: Decimal | None, resource: str) -> str:
    return "—" if amount is None else format_quantity(amount, resource)


@register.filter
def k8s_change(amount: Decimal, resource: str) -> str:
    """A change of an amount, signed: "+2", "-512Mi", "±0"."""
    if not amount:
        return "±0"
    text = format_quantity(amount, resource)
    return text if amount < 0 else f"+{text}"


@register.filter
def units(amount: Decimal | None) -> str:
    """Normalised GPU units with at most two decimals: "16", "4.57"."""
    if amount is None:
        return "—"
    text = f"{amount.quantize(Decimal('0.01')):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@register.filter
def gpu_word(amount: Decimal | str | None, resource: str) -> str:
    """The noun of a GPU line's amount, singular or plural: "GPU", "GPUs", "MIG instances"."""
    one = amount is not None and Decimal(str(amount)) == 1
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return "MIG instance" if one else "MIG instances"
    return "GPU" if one else "GPUs"


@register.simple_tag
def shares(amount: Decimal | None, replicas: int | None, resource: str) -> str:
    """R25: ``{% shares item.limit replicas item.resource %}`` -> "3 shares (30% of a GPU)"
    for the GPUs of a time-sliced flavor, else the amount as ``quantity`` shows it."""
    if amount is None:
        return "—"
    if replicas and resource == GPU_RESOURCE:
        return shares_text(amount, replicas)
    if resource == GPUMEM_RESOURCE:  # vGPU flavors (HAMi): "4.5 GiB of GPU memory"
        return f"{to_display(amount, resource)} of GPU memory"
    return to_display(amount, resource)


@register.simple_tag
def share_step(replicas: int) -> str:
    """ "10 shares per GPU, 10% of a GPU each"."""
    return f"{replicas} shares per GPU, {percent_text(1, replicas)} of a GPU each"


@register.simple_tag
def time_slicing_memory_note() -> str:
    """What a time-sliced share does not give, in words for every page that shows shares."""
    return MEMORY_NOT_ISOLATED


@register.filter
def gpu_memory(mib: int | None) -> str:
    """``{{ flavor.gpu_memory_mib|gpu_memory }}`` -> "15 GiB of GPU memory"."""
    if not mib:
        return "—"
    return f"{to_display(Decimal(mib) * 1024**2, GPUMEM_RESOURCE)} of GPU memory"


@register.simple_tag
def vgpu_caps_note() -> str:
    """What a vGPU share (HAMi) caps, in words for every page that shows vGPU quotas."""
    return VGPU_CAPS


@register.filter
def shares_gpus(capacity: Decimal, replicas: int) -> str:
    """``{{ row.capacity|shares_gpus:row.shares_per_gpu }}`` -> "1 GPU", "4 GPUs"."""
    return gpus_text(capacity, replicas)


@register.filter
def percent_of_gpu(amount: Decimal, replicas: int) -> str:
    """``{{ 3|percent_of_gpu:10 }}`` -> "30%"."""
    return percent_text(amount, replicas)
