"""Time-sliced GPU shares (R25): a GPU advertised as ``replicas`` shares by the NVIDIA device
plugin, and quotas counted in those shares, entered as percentages of one GPU where people
think that way (the seed's T4 split 30 / 30 / 40 over three teams: with 10 shares per GPU,
3, 3 and 4 shares).

A share is a slot in the GPU's time, not a slice of its memory: every pod on a shared GPU sees
the whole framebuffer, and one pod can take memory another then lacks. Pages say so
(``MEMORY_NOT_ISOLATED``).

Plain functions of numbers; the rules that read the database are in ``quotas.services``.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Final

PERCENT: Final = "%"
HUNDRED: Final = Decimal(100)
PERCENT_PLACES: Final = Decimal("0.01")

MEMORY_NOT_ISOLATED: Final = (
    "Time-slicing shares a GPU's time, not its memory: every tenant on the GPU sees its whole "
    "memory, and one tenant's work can take memory another then lacks. A share is one pod's "
    "place on the GPU; when every share is busy each gets an equal slice of time, so 3 shares "
    "of 10 are 30% of the GPU's time."
)

# What a vGPU share (HAMi, ``quotas.vgpu``) caps, beside what a time-sliced share does not.
VGPU_CAPS: Final = (
    "A vGPU share (HAMi) caps each container on the GPU: its GPU memory at what it asked for "
    "(an allocation past it fails in that container only) and its compute at its percent of "
    "the GPU. The team's quota caps the GPU memory and compute its pods ask for together. The "
    "GPU itself is still shared: a fault of the GPU reaches every team on it."
)


class NotWholeShares(ValueError):
    """A percentage that is not a whole number of shares; the message gives the nearest."""


def is_percent(raw: object) -> bool:
    return isinstance(raw, str) and raw.strip().endswith(PERCENT)


def percent_of_gpu(shares: Decimal | int, replicas: int) -> Decimal:
    """What ``shares`` are in percent of one GPU, to two decimals: 3 of 10 -> 30."""
    value = Decimal(shares) * HUNDRED / Decimal(replicas)
    return value.quantize(PERCENT_PLACES, rounding=ROUND_HALF_UP).normalize() + 0


def percent_text(shares: Decimal | int, replicas: int) -> str:
    """'30%', '33.33%', '250%'."""
    return f"{percent_of_gpu(shares, replicas):f}%"


def shares_word(shares: Decimal | int) -> str:
    count = Decimal(shares)
    return f"{count.normalize():f} {'share' if count == 1 else 'shares'}"


def shares_text(shares: Decimal | int, replicas: int) -> str:
    """'3 shares (30% of a GPU)'."""
    return f"{shares_word(shares)} ({percent_text(shares, replicas)} of a GPU)"


def gpus_text(capacity: Decimal | int, replicas: int) -> str:
    """What a capacity of ``capacity`` shares is in GPUs: '1 GPU', '4 GPUs', '2.5 GPUs'."""
    gpus = (Decimal(capacity) / Decimal(replicas)).quantize(PERCENT_PLACES).normalize() + 0
    return f"{gpus:f} {'GPU' if gpus == 1 else 'GPUs'}"


def shares_from_percent(raw: str, *, replicas: int, flavor: str) -> Decimal:
    """Shares for a percentage of one GPU (``"30%"``). Raises ValueError when the text is not
    a percentage, ``NotWholeShares`` (naming the nearest valid values) when it is not a whole
    number of shares."""
    text = raw.strip().removesuffix(PERCENT).strip()
    try:
        percent = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"{raw.strip()!r} is not a percentage of a GPU, as in '30%'") from exc
    if not percent.is_finite() or percent < 0:
        raise ValueError(f"{raw.strip()!r} is not a percentage of a GPU, as in '30%'")
    exact = percent * Decimal(replicas) / HUNDRED
    nearest = exact.quantize(Decimal(1), rounding=ROUND_HALF_UP)
    # 33.33% of a GPU of 3 shares is one share: accept what the pages show, to two decimals.
    if percent.quantize(PERCENT_PLACES, rounding=ROUND_HALF_UP) == percent_of_gpu(
        nearest, replicas
    ):
        return nearest
    below = exact.quantize(Decimal(1), rounding=ROUND_FLOOR)
    options = [n for n in (below, below + 1) if n >= 0]
    nearest_words = " or ".join(f"{percent_text(n, replicas)} ({shares_word(n)})" for n in options)
    raise NotWholeShares(
        f"{percent.normalize():f}% of a GPU is not a whole number of shares: {flavor} gives "
        f"{replicas} shares per GPU, {percent_text(1, replicas)} each; the nearest valid values "
        f"are {nearest_words}"
    )
