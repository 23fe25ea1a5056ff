"""Quota and limit checks for placing a job's tasks, and why a job cannot be placed (pure)."""

from __future__ import annotations

from domain.resources import Resources
from domain.state import Job, State


def limit_breach(state: State, job: Job, amount: Resources) -> str | None:
    """The first queue on the job's path whose hard limit `amount` more would break."""
    for queue in state.ancestors(job.queue):
        breach = queue.quota.limit_breach(queue.subtree_allocated + amount)
        if breach is not None:
            return f"queue {queue.id} would exceed its limit ({breach})"
    return None


def quota_breach(state: State, job: Job, amount: Resources) -> str | None:
    """Why `amount` more would take the job's own queue beyond its deserved quota, if it would."""
    queue = state.queues[job.queue]
    breach = queue.quota.quota_breach(queue.allocated + amount)
    if breach is not None:
        return f"queue {queue.id} would exceed its deserved quota ({breach})"
    return None


def admission_breach(state: State, job: Job, tasks: int) -> str | None:
    """Why `tasks` more of the job may not run now on quota grounds, or None if they may.

    Interactive and non-preemptible jobs run only within deserved quota (Run:AI, KAI): what
    runs beyond quota must be reclaimable. Every job stays within every limit on its path.
    """
    amount = job.per_task * tasks
    breach = limit_breach(state, job, amount)
    if breach is not None:
        return breach
    if not job.preemptible:
        breach = quota_breach(state, job, amount)
        if breach is not None:
            kind = "interactive" if job.interactive else "non-preemptible"
            return f"{kind} jobs run only within deserved quota: {breach}"
    return None


def within_quota(state: State, job: Job, tasks: int) -> bool:
    return quota_breach(state, job, job.per_task * tasks) is None
