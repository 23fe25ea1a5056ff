"""Reclaim-again action: a job blocked while its queue is below its deserved quota is tried once more after allocation gave other queues more (pure).

Allocate serves the most deprived queue first, so a queue below its deserved quota may find its
job blocked (no victims yet: nobody is above their deserved quota) and then see allocation, in
the same cycle, give idle capacity to a queue beyond its own deserved quota (work-conserving).
Cycles run only when something changes, so without a second look the blocked job could wait
for ever while that queue stays above its deserved quota. This action looks once more, at
the end of allocation, at the first job each queue found blocked (so a cycle costs at most one
more try per queue), but only if something lasting changed since it was blocked (Allocate
taking its placed jobs off the pending lists does not count: no try reads them). A job
dispatched in this cycle is never a victim in it, so when only such work would make room, a
timer brings a cycle RECLAIM_AGAIN_MS later that may take it (as a KAI session reclaims what
the previous one allocated). See docs/quotas.md, "Reclaim again".
"""

from __future__ import annotations

from domain.cycle.framework import Cycle, Outcome
from domain.rules.reclaim_deserved import below_deserved
from domain.state import Job, JobStatus

RECLAIM_AGAIN_MS = 1000  # the next look, if this one fails: about a KAI session's period
TIMER = "reclaim_again"  # the kind of that timer (ident: the queue)
BLOCKED = "allocate_blocked"  # the per-cycle memo Allocate fills: its first blocked job per queue
DEQUEUED = "allocate_dequeued"  # and the lasting changes around its dequeues (note_dequeued)


def note_blocked(cycle: Cycle, job: Job) -> None:
    """Called by Allocate for each job it found blocked; only each queue's first is kept."""
    blocked = _blocked(cycle)
    if job.queue not in blocked:
        blocked[job.queue] = (job, cycle.lasting_changes())


def note_dequeued(cycle: Cycle, walked: int) -> None:
    """Called by Allocate once its placed jobs left the pending lists: the lasting changes
    before (`walked`) and after. Leaving a pending list changes nothing a try reads."""
    dequeued: _Dequeued = cycle.memo(DEQUEUED, dict)
    dequeued[walked] = cycle.lasting_changes()


# The memos are made by `dict` itself: calling a subscripted alias costs typing's __call__.
_FirstBlocked = dict[str, tuple[Job, int | None]]
_Dequeued = dict[int, int | None]  # lasting changes before Allocate's dequeues -> after


def _blocked(cycle: Cycle) -> _FirstBlocked:
    """Per queue, in the order queues first found a job blocked: that job, and the lasting
    changes then."""
    blocked: _FirstBlocked = cycle.memo(BLOCKED, dict)
    return blocked


class ReclaimAgain:
    name = "reclaim_again"

    def execute(self, cycle: Cycle) -> None:
        # One look per queue: at the first job it found blocked.
        dequeued: _Dequeued = cycle.memo(DEQUEUED, dict)
        for job, changes_then in list(_blocked(cycle).values()):
            now = cycle.lasting_changes()
            if changes_then is None or changes_then == now:
                continue  # nothing lasting happened since it was found blocked
            if job.status is not JobStatus.PENDING or not below_deserved(cycle, job):
                continue
            if dequeued.get(changes_then) == now:
                # Only Allocate's placed jobs left the pending lists since, which no try
                # reads: a look now finds it blocked for the same reason (it has it) and,
                # as any blocked look, asks for a later one.
                cycle.wake_at(cycle.ts + RECLAIM_AGAIN_MS, TIMER, job.queue)
                continue
            self._try(cycle, job)

    def _try(self, cycle: Cycle, job: Job) -> None:
        statement = cycle.statement
        outcome, reason = cycle.try_schedule(job)
        if outcome is Outcome.PLACED:
            statement.dequeue(job)  # Allocate has already taken its placed jobs off
        elif outcome is Outcome.PREEMPTING:
            statement.set(job, "pending_reason", reason)
            statement.set(job, "blocked_since", None)
            cycle.started_waiting(job)
        else:
            # Its victims may be work dispatched in this very cycle, which is never preempted
            # in the cycle that dispatched it: look again in a later one.
            statement.set(job, "pending_reason", reason)
            cycle.wake_at(cycle.ts + RECLAIM_AGAIN_MS, TIMER, job.queue)
            return
        queue = cycle.state.queues[job.queue]
        if queue.stopped_by == job.id:
            statement.set(queue, "stopped_by", None)
            statement.set(queue, "stopped_policy", None)
