"""The MIG layout planner: which GPU instances each GPU should have, given what runs and what
is wanted.

Input: the GPUs as they are (``GpuState``: model, MIG mode, instances and whether each one runs
work) and the demand (``Demand``: N x a profile, for one GPU model or for any model that offers
the profile, e.g. from tenants' MIG-flavor quotas or an admin's request). Output: a ``Plan`` with
one ``GpuPlan`` per GPU (the layout to reach, whether it differs from today's), what was met, what
was not and why, in words.

The rules, in priority order:

(b) an instance with running work is never touched: every candidate layout of its GPU contains
    it, at its start (a GPU with an unknown model, an unrecognised layout or MIG disabled is left
    as it is: the planner cannot tell what runs there);
(a) as much demand as possible is met, counted in compute slices (a 7g.80gb counts 7, a 1g.10gb
    1), then in instances. Existing instances count: demand is the number of instances of a
    profile wanted on the cluster, busy or idle;
(c) as few GPUs as possible are reconfigured (a GPU whose layout already serves demand stays),
    then as few instances as possible are destroyed or created: an idle instance nobody asked to
    remove stays, since "idle" is only a snapshot;
(d) free space stays usable: the sum over GPUs of the largest profile that still fits beside
    the layout, then of the free memory slices, then of the placements still open (weighted by
    compute slices).

``PlanScore.key()`` orders plans by exactly these rules; both solvers maximise it.

Per GPU the valid layouts are few (2,319 on a 7-slice GPU, 76 on an A30, counting every subset of
``layout.enumerate_layouts``), so they are enumerated exactly, filtered to those that keep the
busy instances in place. Across GPUs:

- ``plan`` (the heuristic): existing instances are claimed for demand first (busy ones always,
  idle ones by demand group); then demand groups are served in order of scarcity (the most
  compute slices first, one GPU model before any model) by adding instances to GPUs already
  being reconfigured before opening another one, opened GPUs filled with as many of the profile
  as fit, and among equals the GPU whose free space stays most usable. New instances have no
  fixed start until the end, so each GPU is repacked exactly. A local improvement pass then gives
  every GPU, in turn, its best layout given all the others (best response) and, while demand is
  unmet, tries two-GPU chains (one GPU gives up a profile so that another can add it, e.g. an
  any-model 4g.40gb moved off an H100 that a "3g.40gb on H100" demand needs), until nothing
  improves or a budget of evaluations is spent. GPUs in the same state are handled as one
  bucket, so 8,000 GPUs take a few seconds.
- ``plan_exhaustive``: the optimum by dynamic programming over the GPUs, the state being the
  demand still unmet; each GPU's options are its best layout per distinct supply (clipped to the
  demand), which loses nothing. Exact, for small instances; it raises ``PlanTooLarge`` beyond
  ``max_states``.

The gap between the two is measured in ``gpu_spec/tests/test_planner.py`` and
``bench/mig_bench.py`` on 200 seeded random small instances (1-4 GPUs) and 200 harder ones (3-6
GPUs): the heuristic met as much demand as the optimum on every one of them. On 300 other
instances of 2-5 GPUs it fell short on one, by one compute slice (a chain of three GPUs).

Pure Python (the standard library and ``gpu_spec.mig``), deterministic: the same GPUs and demand,
in any order, give the same plan.
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gpu_spec.mig.catalogue import PROFILE_NAME, Catalogue, GpuModel, load_catalogue
from gpu_spec.mig.layout import Placement, enumerate_layouts

DEFAULT_MAX_STATES = 200_000
# (changed, instance changes, largest free profile, free memory slices, open placements)
Stats = tuple[int, int, int, int, int]
_MAX_IMPROVEMENT_SWEEPS = 20
_CHAIN_BUDGET = 300_000  # gain evaluations, all local improvement together

# ---------------------------------------------------------------------------------------------
# Public types


@dataclass(frozen=True)
class CurrentInstance:
    """A GPU instance as the node agent reports it. ``busy``: processes run on it."""

    profile: str
    start: int
    busy: bool = False


@dataclass(frozen=True)
class GpuState:
    """A GPU as it is. ``model_name`` is what ``nvmlDeviceGetName()`` returns."""

    uuid: str
    node: str
    model_name: str
    instances: tuple[CurrentInstance, ...] = ()
    mig_enabled: bool = True


@dataclass(frozen=True)
class Demand:
    """``count`` instances of ``profile`` wanted on the cluster, on GPUs of ``model`` (an NVML
    model name) or, when it is None, on any model that offers the profile. ``tenant`` is who
    wants them, for the explanation."""

    profile: str
    count: int
    tenant: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class GpuPlan:
    """The layout one GPU should have. ``changed``: it differs from ``current``, so the agent
    destroys ``destroy`` and creates ``create``; ``kept_busy`` are the busy instances, which
    ``layout`` always contains. ``enable_mig``: MIG must be turned on first (only with
    ``plan(..., enable_mig=True)``). ``note`` says why the planner left a GPU alone, when it
    could not plan it."""

    uuid: str
    layout: tuple[Placement, ...]
    changed: bool
    kept_busy: tuple[Placement, ...]
    node: str = ""
    model_name: str = ""
    current: tuple[Placement, ...] = ()
    enable_mig: bool = False
    note: str = ""

    @property
    def destroy(self) -> tuple[Placement, ...]:
        keep = set(self.layout)
        return tuple(p for p in self.current if p not in keep)

    @property
    def create(self) -> tuple[Placement, ...]:
        have = set(self.current)
        return tuple(p for p in self.layout if p not in have)


@dataclass(frozen=True)
class Unmet:
    """A demand group not fully met: ``placed`` of ``wanted``, and why."""

    profile: str
    wanted: int
    placed: int
    reason: str
    model: str | None = None
    tenants: tuple[str, ...] = ()


class PlanScore(NamedTuple):
    """What a plan achieves, by the rules in priority order (see ``key``)."""

    met_slices: int  # demand met, in compute slices
    met_instances: int  # demand met, in instances
    changed_gpus: int  # GPUs reconfigured
    instance_changes: int  # instances destroyed plus created
    largest_free: int  # sum over GPUs: compute slices of the largest profile that still fits
    free_memory_slices: int  # sum over GPUs
    open_placements: int  # sum over GPUs: placements still open, weighted by compute slices

    def key(self) -> tuple[int, int, int, int, int, int, int]:
        """Higher is better."""
        return (
            self.met_slices,
            self.met_instances,
            -self.changed_gpus,
            -self.instance_changes,
            self.largest_free,
            self.free_memory_slices,
            self.open_placements,
        )


@dataclass
class Plan:
    """``gpus`` in (node, uuid) order; ``met`` and ``wanted`` per profile, in instances."""

    gpus: list[GpuPlan]
    met: dict[str, int]
    unmet: list[Unmet]
    explanation: list[str]
    score: PlanScore
    wanted: dict[str, int]
    method: str = "heuristic"


class PlanTooLarge(ValueError):
    """The exhaustive solver would need more states than allowed."""


# ---------------------------------------------------------------------------------------------
# Per model: every valid layout, as bitmasks over the model's (profile, start) placements


def _profile_weight(name: str) -> int:
    """Compute slices, from the name (the same on every model offering it)."""
    match = PROFILE_NAME.match(name)
    return int(match["g"]) if match else 1


class _ModelIndex:
    """Every valid layout of one GPU model (each maximal layout of ``enumerate_layouts`` and
    every subset of one), with each layout's instance counts and free-space score."""

    def __init__(self, model: GpuModel) -> None:
        self.model = model
        self.profile_names: list[str] = sorted(model.profiles)
        self.profile_pos = {name: i for i, name in enumerate(self.profile_names)}
        options = sorted(
            (start, profile.name, profile.memory_slices)
            for profile in model.profiles.values()
            for start in profile.placements
        )
        self.placements = [Placement(name, start, size) for start, name, size in options]
        self.bit = {(p.profile, p.start): i for i, p in enumerate(self.placements)}
        self.placement_profile = [self.profile_pos[p.profile] for p in self.placements]
        found: set[int] = {0}
        for maximal in enumerate_layouts(model):
            mask = 0
            for placement in maximal:
                mask |= 1 << self.bit[(placement.profile, placement.start)]
            sub = mask
            while sub:
                found.add(sub)
                sub = (sub - 1) & mask
        self.valid = frozenset(found)
        self.count = {mask: self._counts(mask) for mask in found}
        plain = [
            i
            for i, p in enumerate(self.placements)
            if not model.profiles[p.profile].media_extensions
        ]
        # Free space: the largest profile that still fits, the free memory slices, and the
        # placements still open (weighted by compute slices). Higher is more usable.
        self.frag: dict[int, tuple[int, int, int]] = {}
        for mask in found:
            largest = open_slices = 0
            for i in plain:
                if not mask >> i & 1 and mask | 1 << i in self.valid:
                    compute = model.profiles[self.placements[i].profile].compute_slices
                    largest = max(largest, compute)
                    open_slices += compute
            used = sum(self.placements[i].size for i in _bits(mask))
            self.frag[mask] = (largest, model.memory_slices - used, open_slices)
        # (mask, counts, rank of its free space: lower is better), by mask: what scans read.
        self.table = [
            (mask, self.count[mask], tuple(-x for x in self.frag[mask])) for mask in sorted(found)
        ]

    def _counts(self, mask: int) -> tuple[int, ...]:
        counts = [0] * len(self.profile_names)
        for i in _bits(mask):
            counts[self.placement_profile[i]] += 1
        return tuple(counts)

    def layout(self, mask: int) -> tuple[Placement, ...]:
        return tuple(self.placements[i] for i in _bits(mask))


def _bits(mask: int) -> Iterable[int]:
    index = 0
    while mask:
        if mask & 1:
            yield index
        mask >>= 1
        index += 1


@functools.lru_cache(maxsize=64)
def _model_index(model: GpuModel) -> _ModelIndex:
    return _ModelIndex(model)


# ---------------------------------------------------------------------------------------------
# The problem, built once per call


@dataclass
class _Group:
    """Demand for one profile, on one model or (``model`` None) any model offering it."""

    profile: str
    model: str | None
    wanted: int
    tenants: tuple[str, ...]
    weight: int


@dataclass
class _Class:
    """GPUs that are interchangeable for planning: same model, layout and busy instances."""

    index: _ModelIndex | None  # None: unknown model
    current: int  # bitmask of today's layout (0 when not plannable)
    busy: int
    plannable: bool
    note: str
    demanded: tuple[int, ...] = ()  # profile positions with demand on this model
    caps: tuple[int, ...] = ()  # wanted, per demanded profile, by any group this model serves
    _options: tuple[_Option, ...] | None = None
    _memo: dict[tuple[int, tuple[int, ...]], int | None] | None = None
    _counts: dict[int, tuple[int, ...]] | None = None

    @property
    def model_name(self) -> str:
        return self.index.model.name if self.index is not None else ""

    def counts(self, mask: int) -> tuple[int, ...]:
        """Instances per demanded profile in a layout."""
        if self._counts is None:
            self._counts = {}
        found = self._counts.get(mask)
        if found is None:
            assert self.index is not None
            full = self.index.count[mask]
            found = self._counts[mask] = tuple(full[p] for p in self.demanded)
        return found

    def stats(self, mask: int) -> Stats:
        """(changed, instance changes, largest free profile, free memory, open placements)."""
        assert self.index is not None
        largest, free, open_slices = self.index.frag[mask]
        moves = (mask ^ self.current).bit_count()
        return (int(mask != self.current), moves, largest, free, open_slices)

    def best_layout(self, kept: int, new: tuple[int, ...]) -> int | None:
        """The best layout with ``kept`` in place and at least ``new`` more instances of each
        demanded profile (the fewest instance changes, then the most usable free space, then
        the lowest mask); None if none exists."""
        if self._memo is None:
            self._memo = {}
        key = (kept, new)
        if key in self._memo:
            return self._memo[key]
        assert self.index is not None
        kept_counts = self.index.count[kept]
        need = [(pos, kept_counts[pos] + n) for pos, n in zip(self.demanded, new, strict=True) if n]
        current = self.current
        best_rank: tuple[int, tuple[int, ...], int] | None = None
        for mask, counts, space in self.index.table:
            if mask & kept != kept or any(counts[pos] < target for pos, target in need):
                continue
            rank = ((mask ^ current).bit_count(), space, mask)
            if best_rank is None or rank < best_rank:
                best_rank = rank
        best = None if best_rank is None else best_rank[2]
        self._memo[key] = best
        return best

    def options(self) -> tuple[_Option, ...]:
        """The best layout per distinct supply (clipped to the demand): today's layout for its
        own supply, else the fewest instance changes, then the most usable free space."""
        if self._options is None:
            if not self.plannable or self.index is None:
                self._options = (_Option(self.current, (), (0, 0, 0, 0, 0)),)
            else:
                self._options = _options_for(
                    self.index, self.current, self.busy, self.demanded, self.caps
                )
        return self._options


@functools.lru_cache(maxsize=4096)
def _options_for(
    index: _ModelIndex, current: int, busy: int, demanded: tuple[int, ...], caps: tuple[int, ...]
) -> tuple[_Option, ...]:
    """``_Class.options``, shared by every plan with the same GPU state and demand caps. Only
    today's layout has no instance change, so it always wins for its own supply."""
    best: dict[tuple[int, ...], tuple[int, tuple[int, ...], int]] = {}
    pairs = tuple(zip(demanded, caps, strict=True))
    for mask, counts, space in index.table:
        if mask & busy != busy:
            continue
        clipped = tuple([min(counts[pos], cap) for pos, cap in pairs])
        rank = ((mask ^ current).bit_count(), space, mask)
        held = best.get(clipped)
        if held is None or rank < held:
            best[clipped] = rank
    options = []
    for _, (moves, _, mask) in sorted(best.items()):
        counts = index.count[mask]
        largest, free, open_slices = index.frag[mask]
        stats = (int(mask != current), moves, largest, free, open_slices)
        options.append(_Option(mask, tuple(counts[pos] for pos in demanded), stats))
    return tuple(options)


@dataclass(frozen=True)
class _Option:
    mask: int
    counts: tuple[int, ...]  # per demanded profile of the class
    stats: Stats


@dataclass
class _Problem:
    catalogue: Catalogue
    gpus: list[GpuState]  # sorted by (node, uuid)
    models: list[GpuModel | None]  # per GPU
    gpu_class: list[int]  # per GPU
    classes: list[_Class]
    groups: list[_Group]  # scarcity order
    spec_group: dict[tuple[str, str], int]  # (profile, model) -> group
    any_group: dict[str, int]  # profile -> group
    current: list[tuple[Placement, ...]]  # per GPU, as reported
    busy: list[tuple[Placement, ...]]  # per GPU
    wanted: dict[str, int]


def _merge_demand(
    demand: Iterable[Demand], catalogue: Catalogue
) -> dict[tuple[str, str | None], tuple[int, list[str]]]:
    """Demand summed per (profile, model), with its tenants. A model the catalogue does not
    know keeps the name given (nothing can serve it; the explanation says so)."""
    merged: dict[tuple[str, str | None], tuple[int, list[str]]] = {}
    for item in demand:
        if item.count < 0:
            raise ValueError(f"demand for {item.profile} has a negative count ({item.count})")
        model_name: str | None = None
        if item.model is not None:
            model = catalogue.find_model(item.model)
            model_name = model.name if model is not None else item.model
        key = (item.profile.strip(), model_name)
        count, tenants = merged.get(key, (0, []))
        if item.tenant and item.tenant not in tenants:
            tenants.append(item.tenant)
        merged[key] = (count + item.count, tenants)
    return merged


def _build_problem(
    gpus: Sequence[GpuState],
    demand: Iterable[Demand],
    catalogue: Catalogue | None,
    enable_mig: bool,
) -> _Problem:
    catalogue = catalogue or load_catalogue()
    ordered = sorted(gpus, key=lambda g: (g.node, g.uuid))
    uuids = [g.uuid for g in ordered]
    if len(set(uuids)) != len(uuids):
        raise ValueError("two GPUs share a uuid")
    models = [catalogue.find_model(g.model_name) for g in ordered]
    groups = _demand_groups(_merge_demand(demand, catalogue), catalogue, models)
    spec_group = {(g.profile, g.model): i for i, g in enumerate(groups) if g.model is not None}
    any_group = {g.profile: i for i, g in enumerate(groups) if g.model is None}
    wanted: dict[str, int] = {}
    for g in groups:
        wanted[g.profile] = wanted.get(g.profile, 0) + g.wanted

    classes: list[_Class] = []
    class_of: dict[tuple[object, ...], int] = {}
    gpu_class: list[int] = []
    current_list: list[tuple[Placement, ...]] = []
    busy_list: list[tuple[Placement, ...]] = []
    for gpu, model in zip(ordered, models, strict=True):
        current, busy = _placements_of(gpu, model, catalogue)
        current_list.append(current)
        busy_list.append(busy)
        index = _model_index(model) if model is not None else None
        note, current_mask, busy_mask = _gpu_masks(gpu, model, index, current, busy, enable_mig)
        plannable = not note
        key: tuple[object, ...] = (
            (model.name, current_mask, busy_mask)
            if plannable and model is not None
            else ("fixed", gpu.uuid)
        )
        if key not in class_of:
            class_of[key] = len(classes)
            demanded, caps = _demanded_caps(model, index, groups, spec_group, any_group)
            classes.append(_Class(index, current_mask, busy_mask, plannable, note, demanded, caps))
        gpu_class.append(class_of[key])
    return _Problem(
        catalogue=catalogue,
        gpus=ordered,
        models=models,
        gpu_class=gpu_class,
        classes=classes,
        groups=groups,
        spec_group=spec_group,
        any_group=any_group,
        current=current_list,
        busy=busy_list,
        wanted=wanted,
    )


def _demand_groups(
    merged: dict[tuple[str, str | None], tuple[int, list[str]]],
    catalogue: Catalogue,
    models: Sequence[GpuModel | None],
) -> list[_Group]:
    """The demand's groups in scarcity order: heaviest profile first, then the largest in
    memory, a model named before any model, the fewest GPUs able to hold it, then by name."""
    groups = [
        _Group(profile, model_name, count, tuple(sorted(tenants)), _profile_weight(profile))
        for (profile, model_name), (count, tenants) in merged.items()
        if count > 0
    ]
    eligible_gpus = Counter[tuple[str, str | None]]()
    for model in models:
        if model is None:
            continue
        for profile in model.profiles:
            eligible_gpus[(profile, None)] += 1
            eligible_gpus[(profile, model.name)] += 1

    def memory_of(group: _Group) -> int:
        sizes = [
            m.profiles[group.profile].memory_slices
            for m in catalogue.models_with_profile(group.profile)
        ]
        return max(sizes, default=0)

    groups.sort(
        key=lambda g: (
            -g.weight,
            -memory_of(g),
            g.model is None,
            eligible_gpus[(g.profile, g.model)],
            g.profile,
            g.model or "",
        )
    )
    return groups


def _gpu_masks(
    gpu: GpuState,
    model: GpuModel | None,
    index: _ModelIndex | None,
    current: Sequence[Placement],
    busy: Sequence[Placement],
    enable_mig: bool,
) -> tuple[str, int, int]:
    """Why a GPU is left as it is ("": it is plannable), and its layout and busy instances as
    bitmasks of its model's placements (0 when it is left as it is)."""
    if model is None or index is None:
        return f"{gpu.model_name!r} is not a GPU model in the MIG catalogue; left as it is", 0, 0
    if not gpu.mig_enabled and not enable_mig:
        return "MIG is disabled; left as it is (enabling it needs the GPU idle and a reset)", 0, 0
    if not gpu.mig_enabled and gpu.instances:
        return "MIG is disabled but instances are reported; left as it is", 0, 0
    bits = [index.bit.get((p.profile, p.start)) for p in current]
    if any(b is None for b in bits) or len(set(bits)) != len(bits):
        return "today's layout is not one the catalogue knows for this model; left as it is", 0, 0
    current_mask = sum(1 << b for b in bits if b is not None)
    busy_mask = sum(1 << index.bit[(p.profile, p.start)] for p in busy)
    if current_mask not in index.valid:
        return "today's layout breaks the catalogue's MIG rules; left as it is", 0, 0
    return "", current_mask, busy_mask


def _demanded_caps(
    model: GpuModel | None,
    index: _ModelIndex | None,
    groups: Sequence[_Group],
    spec_group: dict[tuple[str, str], int],
    any_group: dict[str, int],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The model's profile positions with demand, and the count wanted of each by the groups
    this model serves (its own and any model's)."""
    if model is None or index is None:
        return (), ()
    pairs = []
    for pos, name in enumerate(index.profile_names):
        cap = 0
        if (name, model.name) in spec_group:
            cap += groups[spec_group[(name, model.name)]].wanted
        if name in any_group:
            cap += groups[any_group[name]].wanted
        if cap:
            pairs.append((pos, cap))
    return tuple(p for p, _ in pairs), tuple(c for _, c in pairs)


def _placements_of(
    gpu: GpuState, model: GpuModel | None, catalogue: Catalogue
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """Today's instances and the busy ones as placements, sorted by start. A profile the model
    does not know gets its size from another model offering it, else 1."""
    current = []
    busy = []
    for instance in gpu.instances:
        profile = model.profiles.get(instance.profile) if model is not None else None
        if profile is not None:
            size = profile.memory_slices
        else:
            others = catalogue.models_with_profile(instance.profile)
            size = others[0].profiles[instance.profile].memory_slices if others else 1
        placement = Placement(instance.profile, instance.start, size)
        current.append(placement)
        if instance.busy:
            busy.append(placement)
    order = lambda p: (p.start, p.profile)  # noqa: E731 - a sort key used twice
    return tuple(sorted(current, key=order)), tuple(sorted(busy, key=order))


# ---------------------------------------------------------------------------------------------
# The ledger: supply per (profile, model) and the demand it meets


class _Ledger:
    """Supply of each profile per model, and the demand met: a model's own groups first, the
    surplus to the any-model group (which is optimal: any model can serve the latter)."""

    def __init__(self, problem: _Problem) -> None:
        self.problem = problem
        self.groups = problem.groups
        self.supply: dict[tuple[str, str], int] = {}
        self.spec_wanted = {key: problem.groups[i].wanted for key, i in problem.spec_group.items()}
        self.any_wanted = {p: problem.groups[i].wanted for p, i in problem.any_group.items()}
        self.weight = {g.profile: g.weight for g in problem.groups}
        self.spec_met: dict[str, int] = {}
        self.overflow: dict[str, int] = {}

    def _met(self, profile: str) -> int:
        return self.spec_met.get(profile, 0) + min(
            self.any_wanted.get(profile, 0), self.overflow.get(profile, 0)
        )

    def delta(self, profile: str, model: str, change: int) -> int:
        """Instances of demand met gained (or lost) when ``change`` instances of ``profile``
        appear on (or go from) a ``model`` GPU."""
        if change == 0:
            return 0
        old = self.supply.get((profile, model), 0)
        new = old + change
        want = self.spec_wanted.get((profile, model), 0)
        spec = min(new, want) - min(old, want)
        over_old = self.overflow.get(profile, 0)
        over_new = over_old + max(0, new - want) - max(0, old - want)
        any_want = self.any_wanted.get(profile, 0)
        return spec + min(any_want, over_new) - min(any_want, over_old)

    def add(self, profile: str, model: str, change: int) -> None:
        if change == 0:
            return
        old = self.supply.get((profile, model), 0)
        new = old + change
        want = self.spec_wanted.get((profile, model), 0)
        self.supply[(profile, model)] = new
        self.spec_met[profile] = self.spec_met.get(profile, 0) + min(new, want) - min(old, want)
        self.overflow[profile] = (
            self.overflow.get(profile, 0) + max(0, new - want) - max(0, old - want)
        )

    def remaining(self, group: int) -> int:
        g = self.groups[group]
        if g.model is not None:
            return max(0, g.wanted - self.supply.get((g.profile, g.model), 0))
        return max(0, g.wanted - self.overflow.get(g.profile, 0))

    def placed(self, group: int) -> int:
        return self.groups[group].wanted - self.remaining(group)


def _supply_names(cls: _Class) -> list[str]:
    assert cls.index is not None
    return [cls.index.profile_names[p] for p in cls.demanded]


def _fixed_counts(problem: _Problem, gpu: int) -> Counter[str]:
    """Demanded instances on a GPU the planner leaves alone (known model only)."""
    model = problem.models[gpu]
    if model is None:
        return Counter()
    return Counter(
        p.profile
        for p in problem.current[gpu]
        if p.profile in model.profiles
        and ((p.profile, model.name) in problem.spec_group or p.profile in problem.any_group)
    )


# ---------------------------------------------------------------------------------------------
# The heuristic


def plan(
    gpus: Sequence[GpuState],
    demand: Iterable[Demand],
    *,
    catalogue: Catalogue | None = None,
    enable_mig: bool = False,
) -> Plan:
    """Plan MIG layouts with the greedy-by-scarcity heuristic and a best-response improvement
    pass (see the module docstring). ``enable_mig``: GPUs with MIG disabled and no instances may
    be given a layout (only when they are known to be idle: the planner cannot see whole-GPU
    work)."""
    problem = _build_problem(gpus, demand, catalogue, enable_mig)
    layouts = _greedy(problem)
    layouts = _improve(problem, layouts)
    return _build_plan(problem, layouts, "heuristic")


def _greedy(problem: _Problem) -> list[int]:
    greedy = _Greedy(problem)
    greedy.count_existing_supply()
    greedy.claim_idle_instances()
    buckets = greedy.buckets()
    for g, group in enumerate(problem.groups):
        greedy.open_new_instances(g, group, buckets)
    return greedy.layouts()


_Bucket = tuple[int, int, tuple[int, ...]]  # (class, kept instances mask, new per profile)


class _Greedy:
    """The greedy plan as it grows: per GPU the instances it keeps (a bitmask of its model's
    placements) and the new instances it gets (a count per demanded profile)."""

    def __init__(self, problem: _Problem) -> None:
        self.problem = problem
        self.classes = problem.classes
        self.ledger = _Ledger(problem)
        self.n = len(problem.gpus)
        self.kept = [0] * self.n
        self.new: list[tuple[int, ...]] = [()] * self.n

    def cls(self, gpu: int) -> _Class:
        return self.classes[self.problem.gpu_class[gpu]]

    def count_existing_supply(self) -> None:
        """Existing supply: GPUs left alone, and busy instances everywhere, count first."""
        for gpu in range(self.n):
            cls, model = self.cls(gpu), self.problem.models[gpu]
            if model is None:
                continue
            if not cls.plannable:
                for profile, count in _fixed_counts(self.problem, gpu).items():
                    self.ledger.add(profile, model.name, count)
                continue
            assert cls.index is not None
            self.kept[gpu] = cls.busy
            self.new[gpu] = (0,) * len(cls.demanded)
            for bit in _bits(cls.busy):
                self.ledger.add(cls.index.placements[bit].profile, model.name, 1)

    def claim_idle_instances(self) -> None:
        """Idle instances claimed for demand, group by group; on GPUs that keep the most
        already, so the emptiest GPUs stay free to reconfigure."""
        for g, group in enumerate(self.problem.groups):
            if self.ledger.remaining(g) == 0:
                continue
            for _, gpu, b in sorted(self._idle_candidates(group)):
                if self.ledger.remaining(g) == 0:
                    break
                self.kept[gpu] |= 1 << b
                self.ledger.add(group.profile, self.cls(gpu).model_name, 1)

    def _idle_candidates(self, group: _Group) -> list[tuple[int, int, int]]:
        """(-instances kept, GPU, placement bit) of each idle instance of the group's profile."""
        candidates = []
        for gpu in range(self.n):
            cls = self.cls(gpu)
            if not cls.plannable or cls.index is None or not _eligible(cls, group):
                continue
            bit_of = cls.index.bit
            for placement in self.problem.current[gpu]:
                b = bit_of[(placement.profile, placement.start)]
                if placement.profile == group.profile and not self.kept[gpu] >> b & 1:
                    candidates.append((-self.kept[gpu].bit_count(), gpu, b))
        return candidates

    def buckets(self) -> dict[_Bucket, list[int]]:
        """Interchangeable GPUs (same class, kept and new instances), each bucket a heap."""
        buckets: dict[_Bucket, list[int]] = {}
        for gpu in range(self.n):
            cls = self.cls(gpu)
            if cls.plannable and cls.index is not None and cls.demanded:
                key = (self.problem.gpu_class[gpu], self.kept[gpu], self.new[gpu])
                buckets.setdefault(key, []).append(gpu)
        for heap in buckets.values():
            heapq.heapify(heap)
        return buckets

    def open_new_instances(self, g: int, group: _Group, buckets: dict[_Bucket, list[int]]) -> None:
        """New instances of one group (the scarcest first), bucket by bucket while demand
        remains and some bucket can take one (``_bucket_rank`` picks the bucket)."""
        while (remaining := self.ledger.remaining(g)) > 0:
            best = self._best_bucket(buckets, group, remaining)
            if best is None:
                break
            key, pos, fill = best
            class_id, kept_mask, _ = key
            cls = self.classes[class_id]
            for gpu in _pop(buckets[key], min(len(buckets[key]), remaining // fill)):
                self.new[gpu] = _bump(self.new[gpu], pos, fill)
                self.ledger.add(group.profile, cls.model_name, fill)
                heapq.heappush(buckets.setdefault((class_id, kept_mask, self.new[gpu]), []), gpu)

    def _best_bucket(
        self, buckets: dict[_Bucket, list[int]], group: _Group, remaining: int
    ) -> tuple[_Bucket, int, int] | None:
        """The bucket ``_bucket_rank`` ranks first, with the profile's position and the copies
        a GPU takes; None when no bucket can take one."""
        best: tuple[tuple[int, ...], _Bucket, int, int] | None = None
        for key, heap in buckets.items():
            if not heap:
                continue
            ranked = _bucket_rank(self.classes[key[0]], key, heap, group, remaining)
            if ranked is not None and (best is None or ranked[0] < best[0]):
                best = (ranked[0], key, ranked[1], ranked[2])
        return None if best is None else best[1:]

    def layouts(self) -> list[int]:
        """Each GPU's layout: today's where nothing new opens, else the best with what it keeps
        and gets."""
        layouts = []
        for gpu in range(self.n):
            cls = self.cls(gpu)
            if not cls.plannable or not any(self.new[gpu]):
                layouts.append(cls.current)
            else:
                mask = cls.best_layout(self.kept[gpu], self.new[gpu])
                assert mask is not None  # every step checked it
                layouts.append(mask)
        return layouts


def _bucket_rank(
    cls: _Class, key: _Bucket, heap: list[int], group: _Group, remaining: int
) -> tuple[tuple[int, ...], int, int] | None:
    """How good a bucket is for the group's next instances (lower is better), where the
    profile is in its supply and how many copies a GPU takes; None: it cannot take one.

    A bucket already reconfigured before a new one; a new one that takes the most copies of
    the profile (it is then filled with them); the fewest instance changes; the least free
    space lost (largest profile that still fits, then free memory slices); the lowest GPU."""
    pos = _position(cls, group) if _eligible(cls, group) else None
    if pos is None:
        return None
    kept_mask, wanted_new = key[1], key[2]
    opened = any(wanted_new)
    before = cls.best_layout(kept_mask, wanted_new) if opened else cls.current
    fill = 0
    while fill < (1 if opened else remaining):
        if cls.best_layout(kept_mask, _bump(wanted_new, pos, fill + 1)) is None:
            break
        fill += 1
    if not fill or before is None:
        return None
    after = cls.best_layout(kept_mask, _bump(wanted_new, pos, 1))
    assert after is not None
    stats_before, stats_after = cls.stats(before), cls.stats(after)
    rank = (
        int(not opened),
        -fill,
        stats_after[1] - stats_before[1],
        *(b - a for b, a in zip(stats_before[2:], stats_after[2:], strict=True)),
        heap[0],
    )
    return rank, pos, fill


def _eligible(cls: _Class, group: _Group) -> bool:
    if cls.index is None or group.profile not in cls.index.model.profiles:
        return False
    return group.model is None or group.model == cls.index.model.name


def _position(cls: _Class, group: _Group) -> int | None:
    """Where the group's profile is in the class's supply vector."""
    assert cls.index is not None
    pos = cls.index.profile_pos.get(group.profile)
    if pos is None or pos not in cls.demanded:
        return None
    return cls.demanded.index(pos)


def _bump(counts: tuple[int, ...], pos: int, by: int) -> tuple[int, ...]:
    return (*counts[:pos], counts[pos] + by, *counts[pos + 1 :])


def _pop(heap: list[int], count: int) -> list[int]:
    return [heapq.heappop(heap) for _ in range(count)]


# Gains in PlanScore.key() order: met slices, met instances, GPUs not changed, instance changes
# avoided, largest free profile, free memory slices, open placements.
Gain = tuple[int, int, int, int, int, int, int]
_NO_GAIN: Gain = (0, 0, 0, 0, 0, 0, 0)


def _improve(problem: _Problem, layouts: list[int], budget: int = _CHAIN_BUDGET) -> list[int]:
    """Local improvement until nothing improves ``PlanScore.key()``: best response (each GPU
    bucket gets its best option with the others held), and, while demand is unmet, two-GPU
    chains (one GPU swaps a profile for another at no loss, so that a second GPU can add the
    one given up), within ``budget`` evaluations so that large clusters stay fast."""
    search = _LocalSearch(problem, layouts)
    for _ in range(_MAX_IMPROVEMENT_SWEEPS):
        improved = search.best_response_sweep()
        if not improved and search.unmet() and search.evaluations < budget:
            improved = search.chain_sweep(budget)
        if not improved:
            break
    return search.layouts


class _LocalSearch:
    """GPUs in buckets of (class, layout): a move is evaluated once per bucket."""

    def __init__(self, problem: _Problem, layouts: list[int]) -> None:
        self.problem = problem
        self.classes = problem.classes
        self.ledger = _Ledger(problem)
        self.layouts = list(layouts)
        self.buckets: dict[tuple[int, int], list[int]] = {}
        self.evaluations = 0
        for gpu, mask in enumerate(self.layouts):
            cls = self.classes[problem.gpu_class[gpu]]
            model = problem.models[gpu]
            if model is None:
                continue
            if not cls.plannable:
                for profile, count in _fixed_counts(problem, gpu).items():
                    self.ledger.add(profile, model.name, count)
                continue
            for name, count in zip(_supply_names(cls), cls.counts(mask), strict=True):
                self.ledger.add(name, model.name, count)
            if cls.demanded:
                self.buckets.setdefault((problem.gpu_class[gpu], mask), []).append(gpu)
        for heap in self.buckets.values():
            heapq.heapify(heap)

    def unmet(self) -> bool:
        return any(self.ledger.remaining(g) for g in range(len(self.problem.groups)))

    def gain(self, key: tuple[int, int], option: _Option) -> Gain:
        self.evaluations += 1
        cls = self.classes[key[0]]
        return _gain(
            self.ledger,
            _supply_names(cls),
            cls.model_name,
            cls.counts(key[1]),
            cls.stats(key[1]),
            option,
        )

    def move(self, gpu: int, key: tuple[int, int], option: _Option) -> None:
        """Move ``gpu`` (already popped from its bucket) to ``option``."""
        cls = self.classes[key[0]]
        for name, old, count in zip(
            _supply_names(cls), cls.counts(key[1]), option.counts, strict=True
        ):
            self.ledger.add(name, cls.model_name, count - old)
        self.layouts[gpu] = option.mask
        heapq.heappush(self.buckets.setdefault((key[0], option.mask), []), gpu)

    def shift(self, key: tuple[int, int], option: _Option, sign: int) -> None:
        """Apply (``sign`` 1) or undo (-1) a move in the ledger only."""
        cls = self.classes[key[0]]
        for name, old, count in zip(
            _supply_names(cls), cls.counts(key[1]), option.counts, strict=True
        ):
            self.ledger.add(name, cls.model_name, sign * (count - old))

    def best_response_sweep(self) -> bool:
        improved = False
        for key in sorted(self.buckets):
            heap = self.buckets[key]
            if not heap:
                continue
            best_gain: Gain | None = None
            best_option: _Option | None = None
            for option in self.classes[key[0]].options():
                if option.mask == key[1]:
                    continue
                gain = self.gain(key, option)
                if gain > _NO_GAIN and (best_gain is None or gain > best_gain):
                    best_gain, best_option = gain, option
            if best_option is None:
                continue
            while heap and self.gain(key, best_option) > _NO_GAIN:
                self.move(heapq.heappop(heap), key, best_option)
                improved = True
        return improved

    def chain_sweep(self, budget: int) -> bool:
        """The first improving two-GPU chain, applied; False when none (or out of budget)."""
        for key_a in sorted(self.buckets):
            heap_a = self.buckets[key_a]
            if not heap_a:
                continue
            cls_a = self.classes[key_a[0]]
            names_a = _supply_names(cls_a)
            have_a = cls_a.counts(key_a[1])
            for option_a in cls_a.options():
                if self.evaluations >= budget:
                    return False
                if option_a.mask == key_a[1]:
                    continue
                gain_a = self.gain(key_a, option_a)
                # The profiles A gives up that then fall short: a second GPU may add them.
                given_up = {
                    name
                    for name, old, count in zip(names_a, have_a, option_a.counts, strict=True)
                    if count < old and self.ledger.delta(name, cls_a.model_name, count - old) < 0
                }
                if not given_up:
                    continue
                self.shift(key_a, option_a, 1)
                found = self._second_move(key_a, given_up, gain_a, budget)
                self.shift(key_a, option_a, -1)
                if found is not None:
                    key_b, option_b = found
                    gpu_a = heapq.heappop(heap_a)
                    gpu_b = heapq.heappop(self.buckets[key_b])
                    self.move(gpu_a, key_a, option_a)
                    self.move(gpu_b, key_b, option_b)
                    return True
        return False

    def _second_move(
        self, key_a: tuple[int, int], given_up: set[str], gain_a: Gain, budget: int
    ) -> tuple[tuple[int, int], _Option] | None:
        best: tuple[Gain, tuple[int, int], _Option] | None = None
        for key_b in sorted(self.buckets):
            heap_b = self.buckets[key_b]
            if len(heap_b) < (2 if key_b == key_a else 1):
                continue
            cls_b = self.classes[key_b[0]]
            names_b = _supply_names(cls_b)
            wanted = [i for i, name in enumerate(names_b) if name in given_up]
            if not wanted:
                continue
            have_b = cls_b.counts(key_b[1])
            for option_b in cls_b.options():
                if self.evaluations >= budget:
                    return None if best is None else (best[1], best[2])
                if all(option_b.counts[i] <= have_b[i] for i in wanted):
                    continue
                gain_b = self.gain(key_b, option_b)
                total = _add_gains(gain_a, gain_b)
                if total > _NO_GAIN and (best is None or total > best[0]):
                    best = (total, key_b, option_b)
        return None if best is None else (best[1], best[2])


def _add_gains(a: Gain, b: Gain) -> Gain:
    return (
        a[0] + b[0],
        a[1] + b[1],
        a[2] + b[2],
        a[3] + b[3],
        a[4] + b[4],
        a[5] + b[5],
        a[6] + b[6],
    )


def _gain(
    ledger: _Ledger,
    names: list[str],
    model: str,
    have: tuple[int, ...],
    stats: Stats,
    option: _Option,
) -> Gain:
    met_slices = met = 0
    for name, old, count in zip(names, have, option.counts, strict=True):
        if count != old:
            delta = ledger.delta(name, model, count - old)
            met += delta
            met_slices += delta * ledger.weight[name]
    changed, moves, largest, free, open_slices = option.stats
    return (
        met_slices,
        met,
        stats[0] - changed,
        stats[1] - moves,
        largest - stats[2],
        free - stats[3],
        open_slices - stats[4],
    )


# ---------------------------------------------------------------------------------------------
# The exhaustive solver


def plan_exhaustive(
    gpus: Sequence[GpuState],
    demand: Iterable[Demand],
    *,
    catalogue: Catalogue | None = None,
    enable_mig: bool = False,
    max_states: int = DEFAULT_MAX_STATES,
) -> Plan:
    """The optimal plan (the highest ``PlanScore.key()``), by dynamic programming over the GPUs
    with the unmet demand as the state. Raises ``PlanTooLarge`` when a layer holds more than
    ``max_states`` states: meant for a few GPUs, to measure the heuristic against."""
    problem = _build_problem(gpus, demand, catalogue, enable_mig)
    groups = problem.groups
    start = [g.wanted for g in groups]
    # GPUs left alone first: their supply is fixed.
    fixed = Counter[tuple[str, str]]()
    for gpu, model in enumerate(problem.models):
        if model is not None and not problem.classes[problem.gpu_class[gpu]].plannable:
            for profile, count in _fixed_counts(problem, gpu).items():
                fixed[(profile, model.name)] += count
    state = tuple(start)
    for (profile, model_name), count in sorted(fixed.items()):
        state = _consume(problem, state, profile, model_name, count)

    # layer[state] = (secondary cost, previous state, option index)
    Secondary = tuple[int, int, int, int, int]
    layers: list[dict[tuple[int, ...], tuple[Secondary, tuple[int, ...], int]]] = []
    # Secondary cost, lower is better: changed GPUs, instance changes, then free space negated.
    frontier: dict[tuple[int, ...], Secondary] = {state: (0, 0, 0, 0, 0)}
    plannable = [
        gpu for gpu in range(len(problem.gpus)) if problem.classes[problem.gpu_class[gpu]].plannable
    ]
    for gpu in plannable:
        cls = problem.classes[problem.gpu_class[gpu]]
        names = _supply_names(cls) if cls.index is not None else []
        options = cls.options()
        layer: dict[tuple[int, ...], tuple[Secondary, tuple[int, ...], int]] = {}
        for prev, cost in frontier.items():
            for i, option in enumerate(options):
                nxt = prev
                for name, count in zip(names, option.counts, strict=True):
                    if count:
                        nxt = _consume(problem, nxt, name, cls.model_name, count)
                changed, moves, largest, free, open_slices = option.stats
                total = (
                    cost[0] + changed,
                    cost[1] + moves,
                    cost[2] - largest,
                    cost[3] - free,
                    cost[4] - open_slices,
                )
                held = layer.get(nxt)
                if held is None or total < held[0]:
                    layer[nxt] = (total, prev, i)
        if len(layer) > max_states:
            raise PlanTooLarge(
                f"the exhaustive solver needs more than {max_states} states at GPU "
                f"{problem.gpus[gpu].uuid}; use plan()"
            )
        layers.append(layer)
        frontier = {s: v[0] for s, v in layer.items()}

    def met_key(s: tuple[int, ...]) -> tuple[int, int]:
        slices = sum((g.wanted - r) * g.weight for g, r in zip(groups, s, strict=True))
        return slices, sum(g.wanted - r for g, r in zip(groups, s, strict=True))

    final = max(frontier, key=lambda s: (met_key(s), tuple(-c for c in frontier[s])))
    layouts = [problem.classes[c].current for c in problem.gpu_class]
    state = final
    for gpu, layer in zip(reversed(plannable), reversed(layers), strict=True):
        _, prev, i = layer[state]
        layouts[gpu] = problem.classes[problem.gpu_class[gpu]].options()[i].mask
        state = prev
    return _build_plan(problem, layouts, "exhaustive")


def _consume(
    problem: _Problem, state: tuple[int, ...], profile: str, model: str, count: int
) -> tuple[int, ...]:
    """The unmet demand after ``count`` instances of ``profile`` on a ``model`` GPU."""
    rest = list(state)
    spec = problem.spec_group.get((profile, model))
    if spec is not None:
        take = min(count, rest[spec])
        rest[spec] -= take
        count -= take
    anyg = problem.any_group.get(profile)
    if anyg is not None and count:
        rest[anyg] -= min(count, rest[anyg])
    return tuple(rest)


# ---------------------------------------------------------------------------------------------
# The result and its explanation


def _build_plan(problem: _Problem, layouts: list[int], method: str) -> Plan:
    ledger = _Ledger(problem)
    gpu_plans: list[GpuPlan] = []
    changed_gpus = largest_free = free_slices = open_placements = instance_changes = 0
    for gpu, mask in enumerate(layouts):
        state = problem.gpus[gpu]
        cls = problem.classes[problem.gpu_class[gpu]]
        model = problem.models[gpu]
        if cls.plannable and cls.index is not None:
            layout = cls.index.layout(mask)
            changed, moves, largest, free, open_slices = cls.stats(mask)
            for name, count in zip(_supply_names(cls), cls.counts(mask), strict=True):
                ledger.add(name, cls.model_name, count)
            largest_free += largest
            free_slices += free
            open_placements += open_slices
        else:
            layout = problem.current[gpu]
            changed = moves = 0
            if model is not None:
                for profile, count in _fixed_counts(problem, gpu).items():
                    ledger.add(profile, model.name, count)
        busy = problem.busy[gpu]
        if not set(busy) <= set(layout):  # rule (b): a bug if it ever fires
            raise AssertionError(f"the plan for {state.uuid} drops a busy instance")
        changed_gpus += changed
        instance_changes += moves
        gpu_plans.append(
            GpuPlan(
                uuid=state.uuid,
                layout=layout,
                changed=bool(changed),
                kept_busy=busy,
                node=state.node,
                model_name=model.name if model is not None else state.model_name,
                current=problem.current[gpu],
                enable_mig=bool(layout) and not state.mig_enabled,
                note=cls.note,
            )
        )

    met: dict[str, int] = {profile: 0 for profile in problem.wanted}
    met_slices = met_instances = 0
    unmet: list[Unmet] = []
    for g, group in enumerate(problem.groups):
        placed = ledger.placed(g)
        met[group.profile] += placed
        met_instances += placed
        met_slices += placed * group.weight
        if placed < group.wanted:
            unmet.append(
                Unmet(
                    profile=group.profile,
                    wanted=group.wanted,
                    placed=placed,
                    reason=_unmet_reason(problem, group, gpu_plans),
                    model=group.model,
                    tenants=group.tenants,
                )
            )
    score = PlanScore(
        met_slices,
        met_instances,
        changed_gpus,
        instance_changes,
        largest_free,
        free_slices,
        open_placements,
    )
    explanation = _explain(problem, gpu_plans, met, unmet)
    return Plan(
        gpus=gpu_plans,
        met=met,
        unmet=unmet,
        explanation=explanation,
        score=score,
        wanted=dict(problem.wanted),
        method=method,
    )


def _describe(layout: Sequence[Placement]) -> str:
    return ", ".join(f"{p.profile}@{p.start}" for p in layout) or "nothing"


def _explain(
    problem: _Problem, gpu_plans: list[GpuPlan], met: dict[str, int], unmet: list[Unmet]
) -> list[str]:
    lines = []
    changed = [p for p in gpu_plans if p.changed]
    wanted_total = sum(problem.wanted.values())
    lines.append(
        f"{_plural(len(gpu_plans), 'GPU', 'GPUs')}: {len(changed)} to reconfigure, "
        f"{len(gpu_plans) - len(changed)} unchanged; demand met: "
        f"{sum(met.values())} of {wanted_total} instances"
    )
    for gpu_plan in changed:
        line = (
            f"{gpu_plan.uuid} ({gpu_plan.model_name} on {gpu_plan.node}): "
            f"{_describe(gpu_plan.current)} -> {_describe(gpu_plan.layout)}"
        )
        if gpu_plan.kept_busy:
            line += f"; keeps the busy {_describe(gpu_plan.kept_busy)}"
        lines.append(line)
    lines.extend(_notes(gpu_plans))
    for item in unmet:
        scope = f" on {item.model}" if item.model else ""
        who = f" (for {', '.join(item.tenants)})" if item.tenants else ""
        lines.append(
            f"{item.wanted} x {item.profile}{scope} wanted{who}, {item.placed} placed: {item.reason}"
        )
    return lines


def _notes(gpu_plans: list[GpuPlan]) -> list[str]:
    """Why GPUs were left alone, one line per reason: a GPU alone by its UUID, several (24
    GPUs with MIG disabled) by their count, models and nodes, not a line each."""
    by_note: dict[str, list[GpuPlan]] = {}
    for gpu_plan in gpu_plans:
        if gpu_plan.note:
            by_note.setdefault(gpu_plan.note, []).append(gpu_plan)
    lines = []
    for note, plans in by_note.items():
        if len(plans) == 1:
            (one,) = plans
            lines.append(f"{one.uuid} ({one.model_name} on {one.node}): {note}")
            continue
        models = _some(sorted({p.model_name for p in plans}))
        nodes = _some(sorted({p.node for p in plans}))
        they = note.replace("left as it is", "left as they are")
        lines.append(f"{len(plans)} GPUs ({models} on {nodes}): {they}")
    return lines


def _some(names: list[str], most: int = 4) -> str:
    """ "a, b, c" or "a, b, c, d and 5 more"."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most} more"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _unmet_reason(problem: _Problem, group: _Group, gpu_plans: list[GpuPlan]) -> str:
    models = _models_for(problem, group)
    if isinstance(models, str):
        return models
    tally = _host_tally(problem, group.profile, models, gpu_plans)
    label = models[0] if len(models) == 1 else "/".join(models)
    parts = tally.parts(group.profile)
    if tally.busy and not tally.other and not tally.fixed:
        lead = "the other" if tally.hosting else "the"
        return f"{lead} {label} GPUs are busy: " + "; ".join(parts)
    return f"no room left on the {label} GPUs: " + "; ".join(parts)


def _models_for(problem: _Problem, group: _Group) -> list[str] | str:
    """The models on this cluster that could serve the group, or why there are none."""
    catalogue, profile = problem.catalogue, group.profile
    present = sorted({m.name for m in problem.models if m is not None})
    if group.model is not None:
        model = catalogue.find_model(group.model)
        if model is None:
            return f"{group.model!r} is not a GPU model in the MIG catalogue"
        if profile not in model.profiles:
            return f"{model.name} does not offer {profile} (it offers {', '.join(model.profiles)})"
        if model.name not in present:
            return f"there is no {model.name} on this cluster"
        return [model.name]
    offering = [m.name for m in catalogue.models_with_profile(profile)]
    if not offering:
        return f"no GPU model in the MIG catalogue offers {profile}"
    models = [m for m in offering if m in present]
    if not models:
        return (
            f"no GPU model on this cluster offers {profile} "
            f"(it is a profile of {', '.join(offering)})"
        )
    return models


@dataclass
class _HostTally:
    """The GPUs of the models that could serve a profile, by what keeps them from it."""

    hosting: int = 0  # hold the profile already
    busy: int = 0  # running work where it would go
    fixed: int = 0  # left alone (MIG disabled, a layout the catalogue does not know)
    other: int = 0  # could host it but serve other demand
    taken_by: Counter[str] = field(default_factory=Counter)

    def parts(self, profile: str) -> list[str]:
        parts = []
        if self.busy:
            parts.append(
                f"{_plural(self.busy, 'GPU has', 'GPUs have')} running work where a {profile} "
                "would go"
            )
        if self.other:
            what = ", ".join(name for name, _ in self.taken_by.most_common(3))
            parts.append(
                _plural(
                    self.other, "GPU that could host it serves", "GPUs that could host it serve"
                )
                + (f" other demand ({what})" if what else " other demand")
            )
        if self.fixed:
            parts.append(
                f"{_plural(self.fixed, 'GPU is', 'GPUs are')} left alone "
                "(MIG disabled, or a layout the catalogue does not know)"
            )
        if self.hosting:
            parts.append(f"{_plural(self.hosting, 'GPU holds', 'GPUs hold')} {profile} already")
        return parts


def _host_tally(
    problem: _Problem, profile: str, models: Sequence[str], gpu_plans: list[GpuPlan]
) -> _HostTally:
    tally = _HostTally()
    for gpu, gpu_plan in enumerate(gpu_plans):
        model = problem.models[gpu]
        if model is None or model.name not in models:
            continue
        cls = problem.classes[problem.gpu_class[gpu]]
        if not cls.plannable:
            tally.fixed += 1
        elif any(p.profile == profile for p in gpu_plan.layout):
            tally.hosting += 1
        elif not _can_host(cls, profile):
            tally.busy += 1
        else:
            tally.other += 1
            tally.taken_by.update(p.profile for p in gpu_plan.layout if p.profile != profile)
    return tally


def _can_host(cls: _Class, profile: str) -> bool:
    """Whether some layout keeping the busy instances has a ``profile`` instance."""
    if cls.index is None:
        return False
    return _hostable(cls.index, cls.busy, profile)


@functools.lru_cache(maxsize=4096)
def _hostable(index: _ModelIndex, busy: int, profile: str) -> bool:
    pos = index.profile_pos.get(profile)
    if pos is None:
        return False
    return any(mask & busy == busy and counts[pos] for mask, counts, _ in index.table)
