"""The admission model on hand-made scenarios; each expected number is worked out in the
comment above it. Pure: no database."""

from __future__ import annotations

import random
import time

import pytest

from advice.replay import FlavorQuota, Job, Queue, replay


def test_borrowing_then_reclaim_when_the_lender_needs_its_guarantee() -> None:
    # a and b guarantee 4 each (pool 8). t=0: a runs 8 (borrows 4). t=10: b asks 4 within its
    # guarantee, the pool is full -> a's borrowing job is preempted, b starts at once.
    # b ends at 60; a's job (8) fits again and reruns its 100 s: 60..160.
    queues = [Queue("a", {"f": FlavorQuota(4)}), Queue("b", {"f": FlavorQuota(4)})]
    jobs = [Job("a1", "a", "f", 8, 0, 100), Job("b1", "b", "f", 4, 10, 50)]
    result = replay(queues, jobs, horizon=200)
    a, b = result.queues["a"], result.queues["b"]
    assert (a.preemptions, b.preemptions) == (1, 0)
    assert (a.finished, b.finished) == (1, 1)
    assert (a.wait_p50_s, b.wait_p50_s) == (0.0, 0.0)  # first admission counts
    # a used 8 GPUs for 10 s and again for 100 s = 880 GPU-s, half of it borrowed;
    # guaranteed 4 x 200 s = 800 GPU-s, used within it 4 x 110 = 440 -> 55%.
    assert a.used_gpu_hours * 3600 == pytest.approx(880)
    assert a.borrowed_gpu_hours * 3600 == pytest.approx(440)
    assert a.utilisation_of_guarantee == pytest.approx(0.55)
    assert a.borrowing_ratio == pytest.approx(0.5)
    # b: 4 GPUs x 50 s = 200 of 800 GPU-s.
    assert b.utilisation_of_guarantee == pytest.approx(0.25)


def test_a_bigger_guarantee_for_the_borrower_removes_the_preemption() -> None:
    # Same work, a guarantees 8 (pool 12): a's 8 GPUs are its own, b's 4 fit beside them.
    queues = [Queue("a", {"f": FlavorQuota(8)}), Queue("b", {"f": FlavorQuota(4)})]
    jobs = [Job("a1", "a", "f", 8, 0, 100), Job("b1", "b", "f", 4, 10, 50)]
    result = replay(queues, jobs, horizon=200)
    assert result.queues["a"].preemptions == 0
    assert result.queues["a"].borrowed_gpu_hours == 0
    assert result.queues["a"].used_gpu_hours * 3600 == pytest.approx(800)


def test_fifo_within_a_queue_and_waits() -> None:
    # a guarantees 4 and may not borrow. Three jobs: 4 GPUs at t=0 (100 s), 4 at t=1,
    # 2 at t=2. At 100 the older 4-GPU job goes first (FIFO), the 2-GPU one waits until 200.
    # Waits: 0, 99, 198 -> p50 99; p95 = 99 + 0.9 x (198 - 99) = 188.1.
    queues = [Queue("a", {"f": FlavorQuota(4, borrowing_limit=0)})]
    jobs = [
        Job("1", "a", "f", 4, 0, 100),
        Job("2", "a", "f", 4, 1, 100),
        Job("3", "a", "f", 2, 2, 100),
    ]
    stats = replay(queues, jobs, horizon=1000).queues["a"]
    assert stats.waits == [0, 99, 198]
    assert stats.wait_p50_s == 99
    assert stats.wait_p95_s == pytest.approx(188.1)


def test_best_effort_fifo_lets_a_small_job_pass_a_big_one_that_does_not_fit() -> None:
    # a guarantees 4, no borrowing; 3 GPUs busy 0..100. At t=1 a 4-GPU job cannot fit, a
    # 1-GPU job at t=2 can: it starts at once. The 4-GPU job starts when 3 + 1 are free.
    queues = [Queue("a", {"f": FlavorQuota(4, borrowing_limit=0)})]
    jobs = [
        Job("busy", "a", "f", 3, 0, 100),
        Job("big", "a", "f", 4, 1, 10),
        Job("small", "a", "f", 1, 2, 50),
    ]
    stats = replay(queues, jobs, horizon=1000).queues["a"]
    assert sorted(stats.waits) == [0, 0, 99]


def test_borrowing_limit_caps_what_a_queue_takes_from_the_cohort() -> None:
    # a guarantees 2 and may borrow 2 (limit 4); b guarantees 6 and is idle. Three 2-GPU jobs
    # of a at t=0: two run (4 = the limit), the third waits for the first to end at 50.
    queues = [
        Queue("a", {"f": FlavorQuota(2, borrowing_limit=2)}),
        Queue("b", {"f": FlavorQuota(6)}),
    ]
    jobs = [Job(str(i), "a", "f", 2, 0, 50) for i in range(3)]
    stats = replay(queues, jobs, horizon=500).queues["a"]
    assert sorted(stats.waits) == [0, 0, 50]
    # 2 GPUs borrowed for 50 s (4 in use, 2 guaranteed) and none after.
    assert stats.borrowed_gpu_hours * 3600 == pytest.approx(100)


def test_lending_limit_keeps_the_rest_of_the_guarantee_for_its_owner() -> None:
    # a guarantees 4 and lends none; b guarantees 4 with no borrowing limit. b's 6-GPU job
    # can use only b's own 4 + what a lends (0): it never fits and waits the whole window.
    queues = [
        Queue("a", {"f": FlavorQuota(4, lending_limit=0)}),
        Queue("b", {"f": FlavorQuota(4)}),
    ]
    result = replay(queues, [Job("b1", "b", "f", 6, 10, 50)], horizon=110)
    b = result.queues["b"]
    assert (b.never_fits, b.admitted, b.waiting_at_end) == (1, 0, 1)
    assert b.wait_p50_s == 100  # censored at the horizon: 110 - 10


def test_reclaim_takes_the_lowest_priority_borrowed_workload_first() -> None:
    # b guarantees 4 and runs base (4, priority 5) + low (2, priority 0) + high (2, priority
    # 5, newer): it borrows 4 of a's. a asks for 2 at t=10: one 2-GPU victim suffices; the lowest priority
    # goes even though the high one is newer.
    queues = [Queue("a", {"f": FlavorQuota(4)}), Queue("b", {"f": FlavorQuota(4)})]
    jobs = [
        Job("base", "b", "f", 4, 0, 1000, priority=5),
        Job("low", "b", "f", 2, 0, 1000, priority=0),
        Job("high", "b", "f", 2, 1, 1000, priority=5),
        Job("a1", "a", "f", 2, 10, 100),
    ]
    result = replay(queues, jobs, horizon=500)
    assert result.queues["b"].preemptions == 1
    assert result.queues["a"].waits == [0]
    # b: 6 GPUs for 1 s, 8 until 10, base + high = 6 while a1 runs (10..110), then low
    # comes back: 8 until 500. 6 + 72 + 600 + 3120 = 3798 GPU-s.
    assert result.queues["b"].used_gpu_hours * 3600 == pytest.approx(3798)
    assert result.queues["b"].waits == [0, 0, 0]


def test_no_reclaim_when_preempting_would_not_make_room() -> None:
    # a guarantees 4, b 4; b borrows 2 (runs 6). a asks for 4 while its own 0 + pool free 2:
    # preempting b's 2 borrowed frees enough (2 + 2 = 4) -> one preemption. Then a second
    # a job asks for 1 more than its guarantee allows to reclaim (5 > 4): nothing preempted.
    queues = [Queue("a", {"f": FlavorQuota(4)}), Queue("b", {"f": FlavorQuota(4)})]
    jobs = [
        Job("b-own", "b", "f", 4, 0, 1000),
        Job("b-borrow", "b", "f", 2, 0, 1000),
        Job("a-big", "a", "f", 5, 5, 10),
    ]
    result = replay(queues, jobs, horizon=100)
    assert result.queues["b"].preemptions == 0
    assert result.queues["a"].admitted == 0


def test_replay_of_two_weeks_of_thousands_of_workloads_is_fast() -> None:
    # 4,000 workloads over 14 days on 6 queues and 2 flavors, overloaded (long waits and
    # preemptions): the what-if runs two of these per page view.
    rng = random.Random(7)  # noqa: S311 - simulated workloads, not secrets
    horizon = 14 * 86400
    queues = [
        Queue(f"t{i}", {"gpu": FlavorQuota(4, 4), "mig": FlavorQuota(7, 0)}) for i in range(6)
    ]
    jobs = [
        Job(str(i), f"t{rng.randrange(6)}", rng.choice(["gpu", "mig"]),
            rng.choice([1, 1, 2, 2, 4, 8]), rng.uniform(0, horizon),
            rng.uniform(1200, 8 * 3600), rng.choice([0, 0, 1]))
        for i in range(4000)
    ]  # fmt: skip
    began = time.process_time()
    result = replay(queues, jobs, horizon=horizon)
    elapsed = time.process_time() - began
    assert sum(q.jobs for q in result.queues.values()) == 4000
    assert sum(q.preemptions for q in result.queues.values()) > 0
    assert elapsed < 1.5, f"replay took {elapsed:.2f} s of CPU"


def test_a_workload_running_when_the_window_opens_holds_its_gpus() -> None:
    # a guarantees 4 and may not borrow. A 4-GPU job admitted before the window runs 100 s
    # more; a 2-GPU job created at 10 waits for it: 100 - 10 = 90 s. The carried job is not
    # one of the window's workloads (no wait of its own), but its GPU-seconds are used.
    queues = [Queue("a", {"f": FlavorQuota(4, borrowing_limit=0)})]
    jobs = [
        Job("old", "a", "f", 4, -500, 100, running_at_start=True),
        Job("new", "a", "f", 2, 10, 50),
    ]
    result = replay(queues, jobs, horizon=1000)
    stats = result.queues["a"]
    assert (stats.jobs, stats.admitted, stats.finished) == (1, 1, 2)
    assert stats.waits == [90]
    assert stats.used_gpu_hours * 3600 == pytest.approx(4 * 100 + 2 * 50)
    assert result.admitted_at == {"old": 0.0, "new": 100.0}


def test_a_workload_created_before_the_window_waits_from_its_creation_and_keeps_its_place() -> None:
    # Created at -60 (still waiting when the window opens) and at 0, both 4 GPUs on a queue
    # of 4: the older one goes first at 0 (wait 60 s), the other after its 100 s (wait 100).
    queues = [Queue("a", {"f": FlavorQuota(4, borrowing_limit=0)})]
    jobs = [Job("late", "a", "f", 4, 0, 100), Job("early", "a", "f", 4, -60, 100)]
    result = replay(queues, jobs, horizon=1000)
    assert result.admitted_at == {"early": 0.0, "late": 100.0}
    assert sorted(result.queues["a"].waits) == [60, 100]
