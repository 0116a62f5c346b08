"""vGPU shares through HAMi (issue 34): GPUs without MIG shared by HAMi's scheduler and
HAMi-core, which caps each container's GPU memory and compute.

On a vGPU flavor (``FlavorKind.VGPU``) three resources count, as HAMi names them:

* ``nvidia.com/gpu``: vGPUs (HAMi advertises each GPU ``deviceSplitCount`` times, the flavor's
  ``vgpu_split``);
* ``nvidia.com/gpumem``: GPU memory per vGPU. HAMi counts MiB; the portal stores bytes (as it
  does ``memory``), takes and shows GiB, and pushes whole MiB;
* ``nvidia.com/gpucores``: compute per vGPU in percent of one GPU (1..100 for one vGPU; a
  team's quota over several GPUs may pass 100).

Plain functions of numbers and strings; the rules that read the database are in
``quotas.services``, the Kubernetes objects in ``quotas.kube``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

MIB: Final = 1024**2
GIB: Final = 1024**3

# The oldest HAMi whose scheduler enforces namespace ResourceQuotas on nvidia.com/gpumem and
# nvidia.com/gpucores ("limits." names, counted per device: HAMi's "Using Extended
# ResourceQuota for NVIDIA Devices"). A cluster with an older HAMi, or none, gets nothing
# pushed for its vGPU flavors.
HAMI_MIN_VERSION: Final = (2, 7, 0)
# HAMi's default deviceSplitCount: vGPUs each GPU is advertised as.
DEFAULT_SPLIT: Final = 10
HAMI_SCHEDULER: Final = "hami-scheduler"

_VERSION_RE: Final = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


class NotWholeMiB(ValueError):
    """GPU memory that is not a whole number of MiB (HAMi counts MiB)."""


def whole_mib(amount: Decimal | int) -> int:
    """Bytes as HAMi's MiB; raises ``NotWholeMiB`` naming the nearest values."""
    value = Decimal(amount)
    mib, rest = divmod(value, MIB)
    if rest:
        raise NotWholeMiB(
            f"{value:f} bytes is not a whole number of MiB (HAMi counts GPU memory in MiB): "
            f"the nearest are {int(mib)} MiB and {int(mib) + 1} MiB"
        )
    return int(mib)


def gib_text(amount: Decimal | int) -> str:
    """GPU memory for people: 4,608 MiB -> '4.5 GiB'; 15,360 MiB -> '15 GiB'."""
    gib = (Decimal(amount) / GIB).quantize(Decimal("0.01")).normalize() + 0
    return f"{gib:f} GiB"


def cores_text(points: Decimal | int) -> str:
    """Compute for people: 30 -> '30% of a GPU'."""
    return f"{Decimal(points).normalize() + 0:f}% of a GPU"


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'v2.7.1' / '2.8' / 'hami:v2.10.0' -> (2, 7, 1) ...; None when no version is in it."""
    match = _VERSION_RE.search(text or "")
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def hami_problem(version: str) -> str:
    """Why a cluster's HAMi cannot hold vGPU quotas ('' when it can): missing, unreadable or
    older than ``HAMI_MIN_VERSION``."""
    wanted = ".".join(map(str, HAMI_MIN_VERSION))
    if not version:
        return f"HAMi was not found on the cluster: vGPU quotas need HAMi {wanted} or newer"
    found = parse_version(version)
    if found is None:
        return f"HAMi's version {version!r} could not be read: vGPU quotas need {wanted} or newer"
    if found < HAMI_MIN_VERSION:
        return (
            f"HAMi {'.'.join(map(str, found))} is older than {wanted}, the first whose "
            "scheduler enforces GPU memory and compute quotas per namespace"
        )
    return ""
