"""Quota and limit checks for placing a job's tasks: each breach is a structured reason (pure)."""

from __future__ import annotations

from domain.reasons import Reason, ReasonKind, reason
from domain.resources import Resources
from domain.state import Job, Queue, State


def limit_breach(state: State, job: Job, amount: Resources) -> Reason | None:
    """The first queue on the job's path whose hard limit `amount` more would break."""
    return _limit_breach(state, job.queue, amount)


def _limit_breach(state: State, queue_id: str, amount: Resources) -> Reason | None:
    for queue in state.limited_path(queue_id):
        breach = queue.quota.limit_breach(queue.subtree_allocated + amount)
        if breach is not None:
            return reason(
                ReasonKind.LIMIT,
                f"queue {queue.id} would exceed its limit ({breach})",
                queue=queue.id,
                breach=breach,
            )
    return None


def own_quota(state: State, queue_id: str) -> tuple[int, int, int]:
    """What a queue's own jobs deserve: its quota less its children's (contract §6)."""
    queue = state.queues[queue_id]
    return queue.quota.own_quota([state.queues[c].quota for c in queue.children])


def quota_breach(state: State, job: Job, amount: Resources) -> Reason | None:
    """Why `amount` more would take the job's own queue beyond its deserved quota, if it would.

    A parent's own jobs count against what its quota leaves after its children's quotas, so
    that guarantees handed down to children are never used up by the parent's own jobs.
    """
    queue = state.queues[job.queue]
    return _deserved_breach(state, queue, queue.allocated + amount, "")


def protected_breach(state: State, job: Job, amount: Resources) -> Reason | None:
    """Why `amount` more of non-preemptible work would exceed the queue's deserved quota.

    Only non-preemptible work (interactive included) is counted: the queue's preemptible jobs
    beyond quota are what reclaim and interactive preemption take back, so they do not stop
    a notebook from starting on an idle GPU (docs/quotas.md).
    """
    return _protected_breach(state, job.queue, amount)


def _protected_breach(state: State, queue_id: str, amount: Resources) -> Reason | None:
    queue = state.queues[queue_id]
    return _deserved_breach(state, queue, queue.protected + amount, " non-preemptible")


def _deserved_breach(state: State, queue: Queue, used: Resources, counted: str) -> Reason | None:
    """Why `used` would exceed the queue's deserved quota (the OWN slot's, for a parent)."""
    own = own_quota(state, queue.id) if queue.children else None
    breach = queue.quota.quota_breach(used, own)
    if breach is not None:
        found = reason(
            ReasonKind.QUOTA,
            f"queue {queue.id} would exceed its deserved quota ({breach}{counted})",
            queue=queue.id,
            breach=breach,
        )
        return found.prefixed("", "", counted=counted.strip()) if counted else found
    return None


def admission_breach(state: State, job: Job, tasks: int) -> Reason | None:
    """Why `tasks` more of the job may not run now on quota grounds, or None if they may.

    Interactive and non-preemptible jobs run only within deserved quota (Run:AI, KAI): what
    runs beyond quota must be reclaimable. Every job stays within every limit on its path.
    """
    return shape_admission_breach(
        state, job.queue, job.per_task * tasks, job.preemptible, job.interactive
    )


def shape_admission_breach(
    state: State, queue_id: str, amount: Resources, preemptible: bool, interactive: bool
) -> Reason | None:
    """`admission_breach` for `amount` more of any pending job of the queue that is as
    preemptible and interactive: all it reads of the job."""
    breach = _limit_breach(state, queue_id, amount)
    if breach is not None:
        return breach
    if not preemptible:
        breach = _protected_breach(state, queue_id, amount)
        if breach is not None:
            kind = "interactive" if interactive else "non-preemptible"
            return breach.prefixed(f"{kind} jobs run only within deserved quota: ", work=kind)
    return None


def within_quota(state: State, job: Job, tasks: int) -> bool:
    return quota_breach(state, job, job.per_task * tasks) is None
