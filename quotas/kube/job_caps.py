"""Job caps (``max_running_jobs``, ``max_queued_jobs``) as Kubernetes and Kueue enforce them.

Neither Kubernetes nor Kueue has a cap on "jobs" that counts every kind of job, running and
queued apart. What each cap becomes here is the nearest bound that always holds:

* **Every job, queued or running: a ResourceQuota on Kueue Workloads.** Kueue makes exactly one
  Workload per job it manages, whatever the kind: a batch/v1 Job, a JobSet, a PyTorchJob (any
  Kubeflow job), a RayJob or RayCluster, a plain pod, a pod group. The object-count key
  ``count/workloads.kueue.x-k8s.io`` therefore counts every managed job once, where
  ``count/jobs.batch`` counted only Jobs (and counted a JobSet's child Jobs and a RayJob's
  submitter Job as jobs of their own). It holds ``max_running_jobs + max_queued_jobs``: a cap
  on the queue alone is not expressible, since nothing counts queued Workloads apart. Kueue
  creates the Workload, so the job over the cap is not refused when it is submitted: it stays
  suspended (a pod stays gated) without a Workload, and Kueue retries until a Workload ends.
  A finished job's Workload counts until the job is deleted (``ttlSecondsAfterFinished``, or
  Kueue's ``objectRetentionPolicies``), as a finished Job counted before.
  A ResourceQuota is per namespace: under Kueue enforcement (where every namespace otherwise
  holds the tenant's whole limit) the total is divided among the tenant's namespaces by their
  shares (evenly without), so the sum holds across them.
* **Running jobs: admitted pods in the tenant's ClusterQueue.** Kueue quotas are resources, and
  the only one that counts per workload is ``pods`` (a Workload uses as many as it has pods).
  The ClusterQueue gets a resource group covering ``pods`` alone, on a flavor of its own
  (``portal-job-slots``: no node labels, so it places nothing), with ``max_running_jobs`` as
  the nominal quota and no borrowing or lending. Every admitted job has at least one pod, so
  at most ``max_running_jobs`` jobs run; a job of N pods takes N of the slots, so a job with
  more pods than the cap is never admitted (Kueue says "insufficient unused quota for pods in
  flavor portal-job-slots").
* **Without Kueue** there are no Workloads and nothing admits: ``count/jobs.batch`` holds the
  sum, as before, and counts batch/v1 Jobs only; no running cap.

Pure: numbers in, dicts out (the compiler calls it).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

from quotas.kube import enforcement

__all__ = [
    "JOB_COUNT_KEY",
    "JOB_SLOTS_FLAVOR",
    "JOB_SLOTS_RESOURCE",
    "QUEUED_CAP_WORDS",
    "RUNNING_CAP_WORDS",
    "WORKLOAD_COUNT_KEY",
    "cluster_queue_group",
    "needs_slots_flavor",
    "quota_hard",
    "total_cap",
]

# What each cap counts, in a person's words (the request form, the API schema, the docs).
RUNNING_CAP_WORDS: Final = (
    "Jobs running at once, of every kind Kueue manages: Jobs, JobSets, PyTorchJobs, RayJobs, "
    "pods and pod groups. Kueue cannot count jobs, so it counts their pods: a job of 4 pods "
    "takes 4 of these, and a job with more pods than the cap never starts."
)
QUEUED_CAP_WORDS: Final = (
    "Jobs waiting to start, of every kind Kueue manages. Kubernetes cannot count waiting jobs "
    "apart, so running and waiting jobs together are capped at the sum of both caps (a finished "
    "job counts until it is deleted); a job over it is held, not refused. Applies only with a "
    "running cap."
)
WORKLOAD_COUNT_KEY: Final = "count/workloads.kueue.x-k8s.io"
JOB_COUNT_KEY: Final = "count/jobs.batch"
JOB_SLOTS_RESOURCE: Final = "pods"
JOB_SLOTS_FLAVOR: Final = "portal-job-slots"


def total_cap(max_running_jobs: int | None, max_queued_jobs: int | None) -> int | None:
    """Running plus queued, or None (unlimited) when either is unlimited."""
    if max_running_jobs is None or max_queued_jobs is None:
        return None
    return max_running_jobs + max_queued_jobs


def quota_hard(
    *,
    has_kueue: bool,
    max_running_jobs: int | None,
    max_queued_jobs: int | None,
    shares: Sequence[Decimal] = (),
    index: int = 0,
) -> dict[str, Decimal]:
    """The count key of namespace ``index``'s ResourceQuota: with Kueue, its part of every
    managed job (``shares``: the namespaces' weights, 1 each for an even split; empty: the one
    namespace holds all); without, batch/v1 Jobs. Empty when the total is unlimited."""
    total = total_cap(max_running_jobs, max_queued_jobs)
    if total is None:
        return {}
    if not has_kueue:
        return {JOB_COUNT_KEY: Decimal(total)}
    part = Decimal(total)
    if len(shares) > 1:
        part = enforcement.split_shares(Decimal(total), shares)[index]
    return {WORKLOAD_COUNT_KEY: part}


def cluster_queue_group(max_running_jobs: int | None) -> dict[str, Any] | None:
    """The ClusterQueue resource group that caps admitted pods (so running jobs), or None."""
    if max_running_jobs is None:
        return None
    return {
        "coveredResources": [JOB_SLOTS_RESOURCE],
        "flavors": [
            {
                "name": JOB_SLOTS_FLAVOR,
                "resources": [
                    {
                        "name": JOB_SLOTS_RESOURCE,
                        "nominalQuota": str(max_running_jobs),
                        # The slots are the tenant's own: none borrowed from its cohort, none lent.
                        "borrowingLimit": "0",
                        "lendingLimit": "0",
                    }
                ],
            }
        ],
    }


def needs_slots_flavor(max_running_jobs: Sequence[int | None]) -> bool:
    """Whether the cluster needs the ``portal-job-slots`` ResourceFlavor (a tenant has a
    running cap)."""
    return any(cap is not None for cap in max_running_jobs)
