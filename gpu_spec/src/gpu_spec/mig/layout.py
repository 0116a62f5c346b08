"""MIG layout rules: does a set of GPU instances fit on one GPU, and where.

A GPU has ``memory_slices`` memory slices (8, or 4 on an A30) and ``compute_slices`` compute
slices (7, or 4). A GPU instance of a profile takes ``memory_slices`` consecutive memory slices
from one of the profile's valid start positions (NVML's ``nvmlGpuInstancePlacement_t``) and
``compute_slices`` compute slices. A layout is valid when (notes-mig.md 1 and 7):

- every profile is one the GPU model offers (``unknown-profile``);
- every given start is one of the profile's valid placements (``invalid-start``);
- no two instances share a memory slice (``overlap``);
- no profile appears more often than its ``max_count`` (``max-count``);
- at most one instance has media extensions, "+me" (``media-extensions``);
- the compute slices add up to at most the GPU's (``compute-slices``), and so do the memory
  slices (``memory-slices``);
- every instance without a start can be given one (``no-room``).

Every broken rule is reported, each message naming the rule's numbers. Instances without a start
get one by exhaustive search (the space per GPU is tiny): as many instances as possible are
placed, then the layout that leaves the free slices most usable wins (the largest profile that
still fits, then the most compute slices that still fit, then the most placements still open),
then the lowest starts; the result is deterministic.

Pure Python (standard library only), like the rest of ``gpu_spec.mig``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpu_spec.mig.catalogue import PROFILE_NAME, GpuModel, Profile, load_catalogue

RULE_UNKNOWN_PROFILE = "unknown-profile"
RULE_INVALID_START = "invalid-start"
RULE_OVERLAP = "overlap"
RULE_MAX_COUNT = "max-count"
RULE_MEDIA_EXTENSIONS = "media-extensions"
RULE_COMPUTE_SLICES = "compute-slices"
RULE_MEMORY_SLICES = "memory-slices"
RULE_NO_ROOM = "no-room"
RULES = (
    RULE_UNKNOWN_PROFILE,
    RULE_INVALID_START,
    RULE_OVERLAP,
    RULE_MAX_COUNT,
    RULE_MEDIA_EXTENSIONS,
    RULE_COMPUTE_SLICES,
    RULE_MEMORY_SLICES,
    RULE_NO_ROOM,
)

# "1c.3g.20gb": a compute-instance profile inside a 3g.20gb GPU instance.
_CI_PROFILE_PREFIX = "c."
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


@dataclass(frozen=True)
class InstanceRequest:
    """A GPU instance wanted on a GPU: a profile name and, optionally, where it starts."""

    profile: str
    start: int | None = None


@dataclass(frozen=True)
class Placement:
    """A GPU instance placed on a GPU: memory slices ``[start, start + size)``."""

    profile: str
    start: int
    size: int

    @property
    def end(self) -> int:
        """The first memory slice after the instance."""
        return self.start + self.size

    @property
    def slices(self) -> range:
        return range(self.start, self.end)

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start


@dataclass(frozen=True)
class LayoutIssue:
    """One broken rule. ``instance`` indexes the request list; ``field`` is "profile" or
    "start" when the rule is about that field of that instance."""

    rule: str
    message: str
    instance: int | None = None
    field: str | None = None

    @property
    def path(self) -> str:
        """Where the issue lies in a request body: ``instances[1].start``, ``instances``."""
        if self.instance is None:
            return "instances"
        base = f"instances[{self.instance}]"
        return f"{base}.{self.field}" if self.field else base


@dataclass
class LayoutResult:
    """``ok`` with one placement per requested instance (in request order), or the errors.
    ``placements`` is empty when the layout is not valid."""

    ok: bool
    placements: list[Placement]
    errors: list[str]
    issues: list[LayoutIssue] = field(default_factory=list)

    @property
    def rules_broken(self) -> list[str]:
        return sorted({issue.rule for issue in self.issues}, key=RULES.index)


# ---------------------------------------------------------------------------------------------
# Wording


def describe_slices(start: int, size: int) -> str:
    """``slice 4`` or ``slices 0-3``."""
    return f"slice {start}" if size == 1 else f"slices {start}-{start + size - 1}"


def describe_starts(starts: Sequence[int]) -> str:
    """``slice 0``, ``slice 0 or 4``, ``slice 0, 2, 4 or 6``."""
    ordered = sorted(starts)
    if len(ordered) == 1:
        return f"slice {ordered[0]}"
    return "slice " + ", ".join(str(s) for s in ordered[:-1]) + f" or {ordered[-1]}"


def _ordinal(position: int) -> str:
    return _ORDINALS[position - 1] if position <= len(_ORDINALS) else f"#{position}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# ---------------------------------------------------------------------------------------------
# Unknown profiles


def _drift_candidate(model: GpuModel, name: str) -> Profile | None:
    """The profile an unknown name most likely means when drivers round its memory differently
    (3g.39gb / 3g.40gb, 7g.79gb / 7g.80gb, 1g.23gb / 1g.24gb: notes-mig.md 1.1): same compute
    slices, same attributes, memory within 1 GB. None unless exactly one profile qualifies."""
    match = PROFILE_NAME.fullmatch(name)
    if match is None:
        return None
    found = []
    for profile in model.profiles.values():
        own = PROFILE_NAME.fullmatch(profile.name)
        if own is None:
            continue
        if (
            own["g"] == match["g"]
            and own["attr"] == match["attr"]
            and abs(int(own["gb"]) - int(match["gb"])) <= 1
        ):
            found.append(profile)
    return found[0] if len(found) == 1 else None


def _unknown_profile_message(model: GpuModel, name: str) -> tuple[str, Profile | None]:
    """The message for a profile the model lacks, and the profile the rest of the check reads
    it as (only for a driver-rounding variant of a real name)."""
    offered = ", ".join(model.profiles)
    head = f"{name} is not a MIG profile of {model.name}"
    candidate = _drift_candidate(model, name)
    if candidate is not None:
        full = model.full_profile()
        what = (
            f"its full-GPU ({candidate.compute_slices}-compute-slice) profile"
            if full is not None and full.name == candidate.name
            else f"its {candidate.compute_slices}-compute-slice profile"
        )
        return (
            f"{head}: {what} is {candidate.name}. Some drivers round the memory in the name "
            f"differently ({name} / {candidate.name}); use the name the node's driver reports. "
            f"The rest of the layout is checked as {candidate.name}.",
            candidate,
        )
    prefix, _, rest = name.partition(_CI_PROFILE_PREFIX)
    if prefix.isdigit() and PROFILE_NAME.fullmatch(rest):
        return (
            f"{head}: it names a compute instance inside a {rest} GPU instance; a layout "
            f"lists GPU-instance profiles ({offered}).",
            None,
        )
    elsewhere = [m.name for m in load_catalogue().models_with_profile(name) if m.name != model.name]
    if elsewhere:
        return (
            f"{head} (it is one of {', '.join(elsewhere)}); {model.name} offers {offered}.",
            None,
        )
    return f"{head}; it offers {offered}.", None


# ---------------------------------------------------------------------------------------------
# Free-space scoring and placement search


def _full_mask(model: GpuModel) -> int:
    return (1 << model.memory_slices) - 1


def _range_mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _plain_profiles(model: GpuModel) -> list[Profile]:
    """Profiles without media extensions: what free space is judged by (one +me per GPU)."""
    return [p for p in model.profiles.values() if not p.media_extensions]


@functools.lru_cache(maxsize=4096)
def _packable_compute(model: GpuModel, free: int, budget: int) -> int:
    """The most compute slices instances could still take in the ``free`` memory slices."""
    if free == 0 or budget <= 0:
        return 0
    lowest = (free & -free).bit_length() - 1
    best = _packable_compute(model, free & ~(1 << lowest), budget)
    for profile in _plain_profiles(model):
        if profile.compute_slices > budget or lowest not in profile.placements:
            continue
        need = _range_mask(lowest, profile.memory_slices)
        if free & need == need:
            best = max(
                best,
                profile.compute_slices
                + _packable_compute(model, free & ~need, budget - profile.compute_slices),
            )
    return best


@functools.lru_cache(maxsize=4096)
def _free_score(model: GpuModel, free: int, budget: int) -> tuple[int, int, int]:
    """How usable free memory slices are, with ``budget`` compute slices left: the largest
    profile that still fits, the most compute slices that still fit, the open placements
    (weighted by compute slices). Higher is better."""
    largest = 0
    options = 0
    for profile in _plain_profiles(model):
        if profile.compute_slices > budget:
            continue
        for start in profile.placements:
            need = _range_mask(start, profile.memory_slices)
            if free & need == need:
                largest = max(largest, profile.compute_slices)
                options += profile.compute_slices
    return largest, _packable_compute(model, free, budget), options


def _disjoint_subsets(profile: Profile, mask: int, cap: int) -> list[tuple[tuple[int, ...], int]]:
    """Every set of at most ``cap`` non-overlapping free starts for ``profile``, with its mask."""
    starts = [s for s in profile.placements if mask & _range_mask(s, profile.memory_slices) == 0]
    out: list[tuple[tuple[int, ...], int]] = []

    def walk(index: int, chosen: tuple[int, ...], used: int) -> None:
        out.append((chosen, used))
        if len(chosen) == cap:
            return
        for j in range(index, len(starts)):
            need = _range_mask(starts[j], profile.memory_slices)
            if used & need == 0:
                walk(j + 1, (*chosen, starts[j]), used | need)

    walk(0, (), 0)
    return out


# (instances placed, free-space score, starts per group) for the groups still to place
_Best = tuple[int, tuple[int, int, int], tuple[tuple[int, ...], ...]]


def _place(
    model: GpuModel, groups: list[tuple[Profile, int]], mask: int, compute: int
) -> list[tuple[int, ...]]:
    """Starts for each group (profile, how many), placing as many as possible, then keeping the
    free slices most usable, then the lowest starts."""
    memo: dict[tuple[int, int, int], _Best] = {}

    def best(index: int, used: int, spent: int) -> _Best:
        key = (index, used, spent)
        if key in memo:
            return memo[key]
        result: _Best
        if index == len(groups):
            free = _full_mask(model) & ~used
            result = (0, _free_score(model, free, max(0, model.compute_slices - spent)), ())
        else:
            profile, cap = groups[index]
            result = (-1, (-1, -1, -1), ())
            for chosen, need in _disjoint_subsets(profile, used, cap):
                placed, score, rest = best(
                    index + 1, used | need, spent + len(chosen) * profile.compute_slices
                )
                candidate = (placed + len(chosen), score, (chosen, *rest))
                if (candidate[0], candidate[1]) > (result[0], result[1]):
                    result = candidate
        memo[key] = result
        return result

    return list(best(0, mask, compute)[2])


# ---------------------------------------------------------------------------------------------
# The rules


def validate_layout(model: GpuModel, instances: Sequence[InstanceRequest]) -> LayoutResult:
    """Check ``instances`` against ``model``'s MIG rules and place those without a start."""
    requests = list(instances)
    resolved, labels, issues = _resolve_profiles(model, requests)
    issues.extend(_count_rules(model, resolved, labels))
    board = _Board(model, requests, resolved, labels)
    issues.extend(board.claim_given_starts())
    waiting = board.waiting()
    unplaced = board.place_waiting(waiting)
    unplaced.extend(board.over_max_count_without_room(waiting, unplaced))
    for index, profile in sorted(unplaced):
        issues.append(_no_room(model, index, profile, resolved, labels, board.starts, board.owner))
    issues.sort(key=lambda i: (RULES.index(i.rule), -1 if i.instance is None else i.instance))
    if issues:
        return LayoutResult(False, [], [i.message for i in issues], issues)
    return LayoutResult(True, board.placements(), [], [])


def _resolve_profiles(
    model: GpuModel, requests: Sequence[InstanceRequest]
) -> tuple[list[Profile | None], list[str], list[LayoutIssue]]:
    """Each instance's profile (None: unknown, or a drifted name taken as the catalogue's) and
    the label messages name it by; an unknown name is reported once, at its first instance."""
    issues: list[LayoutIssue] = []
    resolved: list[Profile | None] = []
    labels: list[str] = []
    unknown: dict[str, Profile | None] = {}
    for index, request in enumerate(requests):
        profile = model.profiles.get(request.profile)
        label = request.profile
        if profile is None:
            if request.profile not in unknown:  # once per name, at its first instance
                message, unknown[request.profile] = _unknown_profile_message(model, request.profile)
                issues.append(LayoutIssue(RULE_UNKNOWN_PROFILE, message, index, "profile"))
            profile = unknown[request.profile]
            if profile is not None:
                label = f"{request.profile} (as {profile.name})"
        resolved.append(profile)
        labels.append(label)
    return resolved, labels, issues


@dataclass
class _Board:
    """The GPU's memory slices as the instances claim them: ``starts[i]`` the start of
    instance i (None: not placed), ``owner[slice]`` the instance holding a slice."""

    model: GpuModel
    requests: list[InstanceRequest]
    resolved: list[Profile | None]
    labels: list[str]
    starts: list[int | None] = field(init=False)
    owner: dict[int, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.starts = [None] * len(self.requests)

    def claim(self, index: int, profile: Profile, start: int) -> None:
        self.starts[index] = start
        for s in profile.slices(start):
            self.owner[s] = index

    def claim_given_starts(self) -> list[LayoutIssue]:
        """Instances with a start, in request order: the first to claim a slice keeps it."""
        issues: list[LayoutIssue] = []
        for index, (request, profile) in enumerate(zip(self.requests, self.resolved, strict=True)):
            if profile is None or request.start is None:
                continue
            issue = self._start_issue(index, profile, request.start)
            if issue is not None:
                issues.append(issue)
            else:
                self.claim(index, profile, request.start)
        return issues

    def _start_issue(self, index: int, profile: Profile, start: object) -> LayoutIssue | None:
        """Why instance ``index`` cannot start at ``start`` (None: it can)."""
        label, model = self.labels[index], self.model
        if isinstance(start, bool) or not isinstance(start, int):
            return LayoutIssue(
                RULE_INVALID_START,
                f"{label}: start must be a whole number of memory slices, not {start!r}",
                index,
                "start",
            )
        if start not in profile.placements:
            off_gpu = not 0 <= start < model.memory_slices
            return LayoutIssue(
                RULE_INVALID_START,
                f"{label} can start only at {describe_starts(profile.placements)} "
                f"on {model.name}, not at slice {start}"
                + (
                    f" ({model.name} has memory slices 0-{model.memory_slices - 1})"
                    if off_gpu
                    else ""
                ),
                index,
                "start",
            )
        clash = sorted({self.owner[s] for s in profile.slices(start) if s in self.owner})
        if not clash:
            return None
        other = clash[0]
        other_start, other_profile = self.starts[other], self.resolved[other]
        assert other_start is not None and other_profile is not None
        return LayoutIssue(
            RULE_OVERLAP,
            f"{label} at {describe_slices(start, profile.memory_slices)} "
            f"overlaps {self.labels[other]} at "
            f"{describe_slices(other_start, other_profile.memory_slices)} "
            f"(instances[{other}]); two GPU instances cannot share a memory slice",
            index,
            "start",
        )

    def waiting(self) -> dict[str, list[int]]:
        """The instances without a start, by profile name, in request order."""
        waiting: dict[str, list[int]] = {}
        for index, (request, profile) in enumerate(zip(self.requests, self.resolved, strict=True)):
            if profile is not None and request.start is None:
                waiting.setdefault(profile.name, []).append(index)
        return waiting

    def place_waiting(self, waiting: dict[str, list[int]]) -> list[tuple[int, Profile]]:
        """Instances without a start: as many as each profile's max_count still allows are
        placed; returns those of them left without room (the ones over max_count are the
        max-count rule's, not reported twice)."""
        fixed_count: Counter[str] = Counter()
        mask = spent = 0
        for index, fixed_start in enumerate(self.starts):
            profile = self.resolved[index]
            if fixed_start is not None and profile is not None:
                fixed_count[profile.name] += 1
                mask |= _range_mask(fixed_start, profile.memory_slices)
                spent += profile.compute_slices
        groups: list[tuple[Profile, list[int]]] = []
        for name, indices in waiting.items():
            profile = self.model.profiles[name]
            room = max(0, profile.max_count - fixed_count[name])
            if room:
                groups.append((profile, indices[:room]))
        groups.sort(key=lambda g: (-g[0].memory_slices, -g[0].compute_slices, g[0].name))
        chosen = _place(self.model, [(p, len(ix)) for p, ix in groups], mask, spent)
        unplaced: list[tuple[int, Profile]] = []
        for (profile, indices), picked in zip(groups, chosen, strict=True):
            for position, index in enumerate(indices):
                if position < len(picked):
                    self.claim(index, profile, picked[position])
                else:
                    unplaced.append((index, profile))
        return unplaced

    def over_max_count_without_room(
        self, waiting: dict[str, list[int]], unplaced: list[tuple[int, Profile]]
    ) -> list[tuple[int, Profile]]:
        """The ones over max_count: no-room too when not even the space would take them (the
        seed's "3 x 4g.40gb": the second and third have no slice 0 to start at)."""
        spare = _full_mask(self.model) & ~sum(
            _range_mask(s, p.memory_slices)
            for s, p in zip(self.starts, self.resolved, strict=True)
            if s is not None and p is not None
        )
        without_room: list[tuple[int, Profile]] = []
        for name, indices in waiting.items():
            profile = self.model.profiles[name]
            for index in indices:
                if self.starts[index] is not None or (index, profile) in unplaced:
                    continue
                free_start = _first_free_start(profile, spare)
                if free_start is None:
                    without_room.append((index, profile))
                else:
                    spare &= ~_range_mask(free_start, profile.memory_slices)
        return without_room

    def placements(self) -> list[Placement]:
        """Every instance placed (a valid layout's)."""
        placements = []
        for profile, placed_start in zip(self.resolved, self.starts, strict=True):
            assert profile is not None and placed_start is not None
            placements.append(Placement(profile.name, placed_start, profile.memory_slices))
        return placements


def _first_free_start(profile: Profile, spare: int) -> int | None:
    """The profile's first placement whose slices are all in ``spare`` (None: none is)."""
    for start in profile.placements:
        need = _range_mask(start, profile.memory_slices)
        if spare & need == need:
            return start
    return None


def _count_rules(
    model: GpuModel, resolved: Sequence[Profile | None], labels: Sequence[str]
) -> list[LayoutIssue]:
    issues: list[LayoutIssue] = []
    seen: dict[str, list[int]] = {}
    for index, profile in enumerate(resolved):
        if profile is not None:
            seen.setdefault(profile.name, []).append(index)
    for name, indices in seen.items():
        profile = model.profiles[name]
        if len(indices) > profile.max_count:
            first_excess = indices[profile.max_count]
            issues.append(
                LayoutIssue(
                    RULE_MAX_COUNT,
                    f"{model.name} allows at most {profile.max_count} x {name} per GPU; "
                    f"the layout asks for {len(indices)}",
                    first_excess,
                    "profile",
                )
            )
    media = [i for i, p in enumerate(resolved) if p is not None and p.media_extensions]
    if len(media) > 1:
        issues.append(
            LayoutIssue(
                RULE_MEDIA_EXTENSIONS,
                "at most one instance with media extensions (+me) fits on a GPU; the layout "
                f"asks for {len(media)} ({', '.join(labels[i] for i in media)})",
                media[1],
                "profile",
            )
        )
    for rule, unit, total, size_of in (
        (RULE_COMPUTE_SLICES, "compute slice", model.compute_slices, "compute_slices"),
        (RULE_MEMORY_SLICES, "memory slice", model.memory_slices, "memory_slices"),
    ):
        per_label: dict[str, list[int]] = {}
        for index, profile in enumerate(resolved):
            if profile is not None:
                per_label.setdefault(labels[index], []).append(getattr(profile, size_of))
        needed = sum(sum(v) for v in per_label.values())
        if needed > total:
            breakdown = ", ".join(
                f"{label}: {len(sizes)} x {sizes[0]}" if len(sizes) > 1 else f"{label}: {sizes[0]}"
                for label, sizes in per_label.items()
            )
            issues.append(
                LayoutIssue(
                    rule,
                    f"the layout needs {_plural(needed, unit)} ({breakdown}); "
                    f"{model.name} has {total}",
                )
            )
    return issues


def _no_room(
    model: GpuModel,
    index: int,
    profile: Profile,
    resolved: Sequence[Profile | None],
    labels: Sequence[str],
    starts: Sequence[int | None],
    owner: dict[int, int],
) -> LayoutIssue:
    same = [i for i, p in enumerate(resolved) if p is not None and p.name == profile.name]
    if len(same) == 1:
        who = "there is no room for it"
    else:
        position = same.index(index) + 1
        word = _ordinal(position)
        article = "the" if position == 1 else ("an" if word[0] in "aeiou" else "a")
        who = f"{article} {word} one has nowhere to go"
    blockers: list[int] = []
    for start in profile.placements:
        for s in profile.slices(start):
            if s in owner and owner[s] not in blockers:
                blockers.append(owner[s])
    occupied: dict[str, list[str]] = {}
    for other in sorted(blockers, key=lambda i: starts[i] or 0):
        other_start = starts[other]
        other_profile = resolved[other]
        if other_start is not None and other_profile is not None:
            occupied.setdefault(labels[other], []).append(
                describe_slices(other_start, other_profile.memory_slices)
            )
    in_the_way = [
        f"{label} at {where[0]}"
        if len(where) == 1
        else f"{len(where)} x {label} at {', '.join(where)}"
        for label, where in occupied.items()
    ]
    where = f"can start only at {describe_starts(profile.placements)} on {model.name}"
    if profile.memory_slices == model.memory_slices:
        where += f" and takes all {model.memory_slices} memory slices"
    detail = f" (in the way: {', '.join(in_the_way)})" if in_the_way else ""
    return LayoutIssue(RULE_NO_ROOM, f"{labels[index]} {where}; {who}{detail}", index, "start")


# ---------------------------------------------------------------------------------------------
# Helpers for the planner


def free_slices(model: GpuModel, placements: Iterable[Placement]) -> tuple[int, ...]:
    """The memory slices no placement occupies, ascending."""
    used = 0
    for placement in placements:
        used |= placement.mask
    return tuple(s for s in range(model.memory_slices) if not used >> s & 1)


def enumerate_layouts(
    model: GpuModel, *, profiles: Iterable[str] | None = None
) -> list[tuple[Placement, ...]]:
    """Every maximal valid layout of ``model`` (no further instance fits), each sorted by start.
    ``profiles`` limits the profiles used (and maximality is judged with those only). Cached
    per model and profile set; the tuples are immutable, the list is a fresh copy."""
    allowed = frozenset(model.profiles if profiles is None else profiles)
    unknown = allowed - set(model.profiles)
    if unknown:
        raise KeyError(f"{model.name} has no profile {', '.join(sorted(unknown))}")
    return list(_maximal_layouts(model, allowed))


@functools.lru_cache(maxsize=256)
def _maximal_layouts(model: GpuModel, allowed: frozenset[str]) -> tuple[tuple[Placement, ...], ...]:
    options = sorted(
        (
            (start, profile)
            for profile in model.profiles.values()
            if profile.name in allowed
            for start in profile.placements
        ),
        key=lambda o: (o[0], -o[1].memory_slices, -o[1].compute_slices, o[1].name),
    )
    found: list[tuple[Placement, ...]] = []
    counts: Counter[str] = Counter()

    def fits(option: tuple[int, Profile], used: int, spent: int, media: int) -> bool:
        start, profile = option
        return (
            used & _range_mask(start, profile.memory_slices) == 0
            and counts[profile.name] < profile.max_count
            and spent + profile.compute_slices <= model.compute_slices
            and not (profile.media_extensions and media)
        )

    def walk(index: int, used: int, spent: int, media: int, chosen: list[Placement]) -> None:
        for j in range(index, len(options)):
            if fits(options[j], used, spent, media):
                start, profile = options[j]
                counts[profile.name] += 1
                chosen.append(Placement(profile.name, start, profile.memory_slices))
                walk(
                    j + 1,
                    used | _range_mask(start, profile.memory_slices),
                    spent + profile.compute_slices,
                    media + profile.media_extensions,
                    chosen,
                )
                chosen.pop()
                counts[profile.name] -= 1
        if chosen and not any(fits(o, used, spent, media) for o in options):
            found.append(tuple(chosen))

    walk(0, 0, 0, 0, [])
    return tuple(found)
