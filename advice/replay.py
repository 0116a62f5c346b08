"""What-if replay: recorded workloads against a set of quotas, with a Kueue-like admission
model. Pure: dataclasses in, results out; no Django, no I/O.

The model (Kueue v1beta2 with the portal's ClusterQueue settings, flattened):

- Each ClusterQueue has per flavor a ``nominal`` quota (the guarantee), an optional
  ``borrowing_limit`` (limit - guarantee; None is unlimited) and an optional
  ``lending_limit`` (how much of the nominal quota others may use; None: all of it).
- All queues given form one cohort (the portal's cohort tree holds no quota of its own, so
  borrowing reaches across it). Per flavor the cohort can lend the sum of the queues'
  lendable quota (``lending_limit`` or ``nominal``); a queue's usage above its non-lendable
  part (``nominal - lending_limit``) draws on that pool. A workload is admitted when its queue
  stays within nominal + borrowing_limit and the pool covers it.
- Per queue, workloads wait in FIFO order of creation (or of their last eviction), best
  effort: a head that does not fit does not hold back smaller ones behind it (the compiler
  writes ``queueingStrategy: BestEffortFIFO``). Across queues, higher priority goes first,
  then the older workload.
- Reclaim (``reclaimWithinCohort: Any``): a workload that fits its queue's own nominal quota
  but not the pool preempts workloads of queues that are borrowing, lowest priority first,
  then the most recently admitted, and only while their queue is still above its nominal
  quota; nothing is preempted unless that makes the workload fit. A preempted workload goes
  back to its queue and later runs its whole duration again (no checkpoint assumed).
- Not modelled: preemption within a queue or to borrow (``LowerPriority``), partial
  admission, several flavors per workload, fair sharing.

Times are seconds from the start of the window; the window ends at ``horizon``. A workload
still waiting at the horizon counts with the wait so far (a lower bound). What was already
there when the window opened is replayed too, so the first hours start from the recorded
state rather than from an empty cluster: a workload created before the window (negative
``created``) waits from then, in FIFO order, and one admitted before it
(``running_at_start``) holds its GPUs from the start for the rest of its run without being
counted among the window's workloads.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

EPSILON = 1e-9
FINISH, ARRIVAL = 0, 1  # at the same instant, capacity is freed before new work arrives


@dataclass(frozen=True)
class FlavorQuota:
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None

    @property
    def kept(self) -> float:
        """What the queue never lends (Kueue: nominalQuota - lendingLimit)."""
        return 0.0 if self.lending_limit is None else max(self.nominal - self.lending_limit, 0.0)

    @property
    def lendable(self) -> float:
        return self.nominal - self.kept

    @property
    def ceiling(self) -> float:
        return math.inf if self.borrowing_limit is None else self.nominal + self.borrowing_limit


@dataclass(frozen=True)
class Queue:
    name: str
    quotas: Mapping[str, FlavorQuota]


@dataclass(frozen=True)
class Job:
    id: str
    queue: str
    flavor: str
    gpus: float
    created: float
    duration: float
    priority: int = 0
    running_at_start: bool = False  # admitted before the window: runs from 0 for ``duration``


@dataclass
class QueueStats:
    queue: str
    jobs: int = 0
    admitted: int = 0
    finished: int = 0
    waiting_at_end: int = 0
    never_fits: int = 0
    preemptions: int = 0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    guaranteed_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    used_within_guarantee_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    waits: list[float] = field(default_factory=list, repr=False)

    @property
    def utilisation_of_guarantee(self) -> float | None:
        """The share of the guaranteed GPU-hours the queue itself used (0..1)."""
        if self.guaranteed_gpu_hours <= 0:
            return None
        return self.used_within_guarantee_gpu_hours / self.guaranteed_gpu_hours

    @property
    def borrowing_ratio(self) -> float | None:
        """Borrowed GPU-hours over used GPU-hours (0..1)."""
        if self.used_gpu_hours <= 0:
            return None
        return self.borrowed_gpu_hours / self.used_gpu_hours


@dataclass
class ReplayResult:
    horizon_s: float
    queues: dict[str, QueueStats]
    events: int
    skipped_jobs: int  # jobs of queues or flavors not in the replay
    admitted_at: dict[str, float] = field(default_factory=dict)  # job id -> first admission
    preempted: set[str] = field(default_factory=set)  # ids of jobs preempted at least once


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(eq=False)  # identity: list.remove must take this run, not an equal one
class _Run:
    job: Job
    order: float  # FIFO key: creation, or the last eviction
    token: int = 0  # bumps on every admission, so a stale finish event is ignored
    started: float | None = None
    first_admitted: float | None = None


class _Cohort:
    """Usage per queue and flavor, and the lending pool per flavor."""

    def __init__(self, queues: Sequence[Queue]) -> None:
        self.quotas = {q.name: dict(q.quotas) for q in queues}
        self.usage: dict[str, dict[str, float]] = {q.name: {} for q in queues}
        # Per queue: GPUs in use, of them within the nominal quota, and borrowed.
        self.rates: dict[str, tuple[float, float, float]] = {
            q.name: (0.0, 0.0, 0.0) for q in queues
        }
        self.pool: dict[str, float] = {}
        self.pool_used: dict[str, float] = {}
        for q in queues:
            for flavor, quota in q.quotas.items():
                self.pool[flavor] = self.pool.get(flavor, 0.0) + quota.lendable
                self.pool_used.setdefault(flavor, 0.0)

    def _drawn(self, queue: str, flavor: str, usage: float) -> float:
        return max(usage - self.quotas[queue][flavor].kept, 0.0)

    def could_ever_fit(self, job: Job) -> bool:
        quota = self.quotas.get(job.queue, {}).get(job.flavor)
        if quota is None:
            return False
        room = quota.kept + self.pool.get(job.flavor, 0.0)
        return job.gpus <= min(quota.ceiling, room) + EPSILON

    def fits(self, queue: str, flavor: str, gpus: float) -> bool:
        quota = self.quotas[queue].get(flavor)
        if quota is None:
            return False
        used = self.usage[queue].get(flavor, 0.0)
        if used + gpus > quota.ceiling + EPSILON:
            return False
        extra = self._drawn(queue, flavor, used + gpus) - self._drawn(queue, flavor, used)
        return self.pool_used[flavor] + extra <= self.pool[flavor] + EPSILON

    def add(self, queue: str, flavor: str, gpus: float) -> None:
        used = self.usage[queue].get(flavor, 0.0)
        self.pool_used[flavor] += self._drawn(queue, flavor, used + gpus) - self._drawn(
            queue, flavor, used
        )
        self.usage[queue][flavor] = used + gpus
        self._rate(queue)

    def _rate(self, queue: str) -> None:
        used = within = borrowed = 0.0
        for flavor, amount in self.usage[queue].items():
            quota = self.quotas[queue].get(flavor)
            nominal = quota.nominal if quota else 0.0
            used += amount
            within += min(amount, nominal)
            borrowed += max(amount - nominal, 0.0)
        self.rates[queue] = (used, within, borrowed)

    def remove(self, queue: str, flavor: str, gpus: float) -> None:
        self.add(queue, flavor, -gpus)

    def borrowing(self, queue: str, flavor: str) -> float:
        quota = self.quotas[queue].get(flavor)
        nominal = quota.nominal if quota else 0.0
        return max(self.usage[queue].get(flavor, 0.0) - nominal, 0.0)


def replay(queues: Sequence[Queue], jobs: Sequence[Job], *, horizon: float) -> ReplayResult:
    """Run ``jobs`` (created within [0, horizon)) through ``queues`` until ``horizon``."""
    cohort = _Cohort(queues)
    stats = {q.name: QueueStats(q.name) for q in queues}
    for q in queues:
        stats[q.name].guaranteed_gpu_hours = (
            sum(quota.nominal for quota in q.quotas.values()) * horizon / 3600
        )
    events: list[tuple[float, int, int, int, _Run]] = []
    seq = 0
    skipped = 0
    carried: list[_Run] = []
    for job in sorted(jobs, key=lambda j: (j.created, j.id)):
        if job.queue not in stats or job.created >= horizon:
            skipped += 1
            continue
        if job.running_at_start:
            carried.append(_Run(job, job.created))
            continue
        stats[job.queue].jobs += 1
        if not cohort.could_ever_fit(job):
            stats[job.queue].never_fits += 1
        seq += 1
        # Created before the window: it arrives at 0, keeping its place in the queue.
        heapq.heappush(events, (max(job.created, 0.0), ARRIVAL, seq, 0, _Run(job, job.created)))

    # Waiting workloads by (queue, flavor, GPUs, priority), each group in FIFO order (a
    # newcomer or an evicted workload is always the latest, so appending keeps the order).
    pending: dict[tuple[str, str], dict[tuple[float, int], deque[_Run]]] = {}

    def wait(run: _Run) -> None:
        job = run.job
        groups = pending.setdefault((job.queue, job.flavor), {})
        groups.setdefault((job.gpus, job.priority), deque()).append(run)

    running: dict[str, list[_Run]] = {q.name: [] for q in queues}
    admitted_at: dict[str, float] = {}
    preempted: set[str] = set()
    clock = 0.0
    processed = 0

    def advance(to: float) -> None:
        nonlocal clock
        span = (to - clock) / 3600
        if span > 0:
            for name, (used, within, borrowed) in cohort.rates.items():
                if used > EPSILON:
                    queue_stats = stats[name]
                    queue_stats.used_gpu_hours += used * span
                    queue_stats.used_within_guarantee_gpu_hours += within * span
                    queue_stats.borrowed_gpu_hours += borrowed * span
        clock = to

    def start(run: _Run, now: float) -> None:
        nonlocal seq
        job = run.job
        cohort.add(job.queue, job.flavor, job.gpus)
        run.token += 1
        run.started = now
        if run.first_admitted is None:
            run.first_admitted = now
            admitted_at[job.id] = now
            if not job.running_at_start:
                stats[job.queue].admitted += 1
                stats[job.queue].waits.append(now - job.created)
        running[job.queue].append(run)
        seq += 1
        heapq.heappush(events, (now + job.duration, FINISH, seq, run.token, run))

    def reclaim(job: Job) -> list[_Run] | None:
        """Borrowing workloads whose preemption lets ``job`` in, or None when none would."""
        quota = cohort.quotas[job.queue].get(job.flavor)
        if quota is None:
            return None
        if cohort.usage[job.queue].get(job.flavor, 0.0) + job.gpus > quota.nominal + EPSILON:
            return None  # only a queue within its own nominal quota reclaims
        candidates = [
            r
            for name, runs in running.items()
            if name != job.queue and cohort.borrowing(name, job.flavor) > EPSILON
            for r in runs
            if r.job.flavor == job.flavor
        ]
        candidates.sort(key=lambda r: (r.job.priority, -(r.started or 0.0), r.job.id))
        chosen: list[_Run] = []
        for victim in candidates:
            if cohort.fits(job.queue, job.flavor, job.gpus):
                break
            if cohort.borrowing(victim.job.queue, job.flavor) <= EPSILON:
                continue
            cohort.remove(victim.job.queue, job.flavor, victim.job.gpus)
            chosen.append(victim)
        fits = cohort.fits(job.queue, job.flavor, job.gpus)
        for victim in chosen:  # undo; the caller evicts for real
            cohort.add(victim.job.queue, job.flavor, victim.job.gpus)
        return chosen if fits and chosen else None

    def evict(victim: _Run, now: float) -> None:
        job = victim.job
        cohort.remove(job.queue, job.flavor, job.gpus)
        running[job.queue].remove(victim)
        victim.token += 1  # its finish event is now stale
        victim.order = now
        victim.started = None
        stats[job.queue].preemptions += 1
        preempted.add(job.id)
        wait(victim)

    def try_admit(run: _Run, now: float) -> bool:
        job = run.job
        if cohort.fits(job.queue, job.flavor, job.gpus):
            start(run, now)
            return True
        victims = reclaim(job)
        if victims is None:
            return False
        for victim in victims:
            evict(victim, now)
        start(run, now)
        return True

    def room(queue: str, flavor: str, borrowed: Mapping[str, float]) -> float:
        """The biggest workload ``queue`` might admit on ``flavor`` now (reclaim included);
        ``borrowed``: what all queues borrow per flavor."""
        quota = cohort.quotas[queue].get(flavor)
        if quota is None:
            return -1.0
        used = cohort.usage[queue].get(flavor, 0.0)
        free = cohort.pool[flavor] - cohort.pool_used[flavor] + max(quota.kept - used, 0.0)
        biggest = min(quota.ceiling - used, free)
        others = borrowed.get(flavor, 0.0) - max(used - quota.nominal, 0.0)
        if quota.nominal - used > biggest and others > EPSILON:
            biggest = quota.nominal - used
        return biggest

    def schedule(now: float) -> None:
        """Admit what fits, best head first (higher priority, then older) among the groups
        of one queue, flavor, size and priority; each group is FIFO, and a group whose head
        does not fit is skipped for the rest of the pass (room only shrinks within it)."""
        failed: set[tuple[str, str, float, int]] = set()
        while True:
            borrowed: dict[str, float] = defaultdict(float)
            for name, per_flavor in cohort.usage.items():
                for flavor, used in per_flavor.items():
                    quota = cohort.quotas[name].get(flavor)
                    borrowed[flavor] += max(used - (quota.nominal if quota else 0.0), 0.0)
            best: tuple[tuple[int, float, str], tuple[str, str], tuple[float, int]] | None = None
            for (queue, flavor), groups in pending.items():
                limit = room(queue, flavor, borrowed) + EPSILON
                for (gpus, priority), waiting in groups.items():
                    if gpus > limit or (queue, flavor, gpus, priority) in failed:
                        continue
                    head = waiting[0]
                    rank = (-priority, head.order, head.job.id)
                    if best is None or rank < best[0]:
                        best = (rank, (queue, flavor), (gpus, priority))
            if best is None:
                return
            _, outer, inner = best
            waiting = pending[outer][inner]
            if try_admit(waiting[0], now):
                waiting.popleft()
                if not waiting:
                    del pending[outer][inner]
                    if not pending[outer]:
                        del pending[outer]
            else:
                failed.add((*outer, *inner))

    for run in carried:  # as recorded: admitted already, whatever the quotas say now
        start(run, 0.0)
    dirty = False  # something finished: what waits gets a pass
    while events and events[0][0] < horizon:
        now, kind, _, token, run = heapq.heappop(events)
        processed += 1
        advance(now)
        if kind == ARRIVAL:
            # Best-effort FIFO: older waiting workloads did not fit, and an arrival frees
            # nothing, so only the newcomer can get in now.
            job = run.job
            group = pending.get((job.queue, job.flavor), {}).get((job.gpus, job.priority))
            if group or not try_admit(run, now):
                wait(run)
        elif token == run.token:  # else preempted since: a stale finish
            job = run.job
            cohort.remove(job.queue, job.flavor, job.gpus)
            running[job.queue].remove(run)
            stats[job.queue].finished += 1
            dirty = True
        # Free everything finishing at this instant before admitting anything.
        if dirty and not (events and events[0][0] == now and events[0][1] == FINISH):
            schedule(now)
            dirty = False
    advance(horizon)

    for groups in pending.values():
        for waiting in (r for group in groups.values() for r in group):
            if waiting.job.running_at_start:
                continue  # not one of the window's workloads
            queue_stats = stats[waiting.job.queue]
            queue_stats.waiting_at_end += 1
            if waiting.first_admitted is None:
                queue_stats.waits.append(horizon - waiting.job.created)
    for queue_stats in stats.values():
        queue_stats.wait_p50_s = percentile(queue_stats.waits, 0.5)
        queue_stats.wait_p95_s = percentile(queue_stats.waits, 0.95)
    return ReplayResult(horizon, stats, processed, skipped, admitted_at, preempted)
