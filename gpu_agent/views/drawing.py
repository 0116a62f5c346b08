"""The fleet pages' drawings: a GPU's memory slices with the instances on them (observed,
desired, proposed), as plain data the templates lay out with CSS classes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_agent.models import Gpu, MigInstance
from gpu_spec.mig.catalogue import GpuModel
from gpu_spec.mig.layout import Placement, describe_slices


def processes_text(processes: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    out = []
    for p in processes:
        pod = p.get("pod_uid") or ""
        out.append(f"pid {p.get('pid')}" + (f" · pod {pod}" if pod else ""))
    return tuple(out)


@dataclass(frozen=True)
class SliceBlock:
    """One GPU instance in a drawing. ``kind``: busy / idle (observed), kept / new (a proposal
    or a desired layout, against what is observed), destroy (a plan's current layout)."""

    profile: str
    start: int
    size: int
    kind: str
    gi_id: int | None = None
    processes: tuple[str, ...] = ()
    tenant: str = ""

    @property
    def slices_text(self) -> str:
        return describe_slices(self.start, self.size)

    @property
    def free(self) -> bool:
        return False


@dataclass(frozen=True)
class FreeCell:
    start: int
    size: int = 1
    free: bool = True


@dataclass(frozen=True)
class SliceDrawing:
    """A GPU's memory slices with its instances on them (``templates/gpu_agent/_slices.html``
    draws it: a row of ``slices`` cells, each block spanning its slices)."""

    slices: int
    blocks: tuple[SliceBlock, ...] = ()
    note: str = ""

    @property
    def numbers(self) -> range:
        return range(self.slices)

    @property
    def free_slices(self) -> list[int]:
        used = {s for b in self.blocks for s in range(b.start, b.start + b.size)}
        return [s for s in range(self.slices) if s not in used]

    @property
    def cells(self) -> list[SliceBlock | FreeCell]:
        """Blocks and free slices in slice order (the grid places them left to right)."""
        cells: list[SliceBlock | FreeCell] = [*self.blocks, *map(FreeCell, self.free_slices)]
        return sorted(cells, key=lambda c: (c.start, c.free))


def _size(model: GpuModel | None, profile: str) -> int:
    found = model.find_profile(profile) if model is not None else None
    return found.memory_slices if found is not None else 1


def _width(model: GpuModel | None, ends: Iterable[int]) -> int:
    return model.memory_slices if model is not None else max(ends, default=0)


def drawing_observed(
    gpu: Gpu, model: GpuModel | None, instances: Sequence[MigInstance]
) -> SliceDrawing:
    blocks = tuple(
        SliceBlock(
            profile=i.profile,
            start=i.start,
            size=i.size,
            kind="busy" if i.busy else "idle",
            gi_id=i.gi_id,
            processes=processes_text(i.processes),
            tenant=i.tenant.slug if i.tenant is not None else "",
        )
        for i in instances
    )
    note = ""
    if not gpu.mig_mode_current:
        note = "MIG is disabled on this GPU" + (
            " (enabled once it is reset)" if gpu.mig_mode_pending else ""
        )
    elif not blocks:
        note = "MIG enabled, no GPU instances"
    return SliceDrawing(_width(model, (b.start + b.size for b in blocks)), blocks, note)


def drawing_layout(
    model: GpuModel | None,
    instances: Iterable[Mapping[str, Any] | Placement],
    *,
    observed: Iterable[MigInstance] = (),
    mig_enabled: bool = True,
) -> SliceDrawing:
    """A desired or proposed layout; each block is "kept" when the GPU has that instance
    already (same profile at the same start), else "new"."""
    have = {(i.profile, i.start) for i in observed}
    blocks = []
    for item in instances:
        if isinstance(item, Placement):
            profile, start, size = item.profile, item.start, item.size
        else:
            if item.get("start") is None:
                continue
            profile, start = item["profile"], int(item["start"])
            size = _size(model, profile)
        kind = "kept" if (profile, start) in have else "new"
        blocks.append(SliceBlock(profile, start, size, kind))
    note = "" if mig_enabled else "MIG disabled: the GPU is used whole"
    if mig_enabled and not blocks:
        note = "MIG enabled, no GPU instances"
    return SliceDrawing(_width(model, (b.start + b.size for b in blocks)), tuple(blocks), note)


def drawing_plan(
    model: GpuModel | None,
    placements: Sequence[Placement],
    *,
    other: Sequence[Placement],
    busy: Sequence[Placement],
    current: bool,
) -> SliceDrawing:
    """One side of a planned change: the current layout (instances to destroy marked) or the
    proposed one (instances to create marked); busy instances are kept by the planner."""
    keep = set(other)
    blocks = []
    for p in placements:
        if p in busy:
            kind = "busy"
        elif p in keep:
            kind = "kept"
        else:
            kind = "destroy" if current else "new"
        blocks.append(SliceBlock(p.profile, p.start, p.size, kind))
    note = "" if blocks else "no GPU instances"
    return SliceDrawing(_width(model, (p.end for p in placements)), tuple(blocks), note)
