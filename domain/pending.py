"""Why each pending job of a queue waits and where it stands: a query for projections (pure).

The cycle keeps only what is cheap: per queue, the job whose block stopped it and under which
policy (`Queue.stopped_by`, `Queue.stopped_policy`); per job, the reason it was given when it
was last tried (`Job.pending_reason`) and since when it is blocked (`Job.blocked_since`). Jobs
behind a stop were not tried, so their reason is derived here, on demand; this query walks the
whole queue (O(pending)), the cycle never does that for reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from domain.cycle.ordering import pending_in_order
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.reasons import Reason, ReasonKind, reason
from domain.state import Job, JobStatus, Queue, State


class Standing(StrEnum):
    """Where a pending job stands after the last cycle."""

    NEW = "new"  # no cycle has tried it yet
    BLOCKING = "blocking"  # blocked, and its policy stops the queue at it
    SKIPPED = "skipped"  # blocked, and its policy let the queue go on past it
    PREEMPTING = "preempting"  # victims are stopping for it; what they free is held for it
    BEHIND = "behind"  # not tried: a job ahead of it stops the queue


@dataclass(frozen=True, slots=True)
class PendingEntry:
    position: int  # 1 = tried first
    job: str
    priority: int
    effective_priority: int
    interactive: bool
    standing: Standing
    reason: Reason  # its kind, the facts, and a sentence a person can act on
    blocked_since: int | None  # ts of the first cycle that found it blocked
    skip_in_s: float | None  # balance only: seconds left before the queue skips it


def pending_view(
    state: State, queue_id: str, now: int, plugins: Plugins = DEFAULT_PLUGINS
) -> list[PendingEntry]:
    """Every pending job of the queue in the order the next cycle tries them, with why it waits."""
    queue = state.queues[queue_id]
    policy = plugins.queue_policies[queue.policy.kind]
    stop = queue.stopped_by
    stopper = state.jobs.get(stop) if stop is not None else None
    if stopper is None or stopper.status is not JobStatus.PENDING:
        stop = None  # the job that stopped the queue has since left it
    entries: list[PendingEntry] = []
    behind = False
    for position, job in enumerate(pending_in_order(queue, policy, now), start=1):
        skip_in_s = None
        why: Reason
        if behind:
            standing = Standing.BEHIND
            why = _behind(queue, stop or "")
        elif job.id == stop:
            standing = Standing.BLOCKING
            skip_in_s = policy.skips_in(job, queue, now)
            blocker = plugins.queue_policies[queue.stopped_policy or queue.policy.kind]
            why = _core(job).prefixed(blocker.blocking(job, queue, skip_in_s) + ": ")
            behind = True
        elif job.awaiting:
            standing = Standing.PREEMPTING
            awaiting = tuple(sorted(job.awaiting))
            why = reason(
                ReasonKind.PREEMPTING,
                f"preempting {', '.join(awaiting)} to make room; their resources are held for it",
                awaiting=awaiting,
            )
        elif job.pending_reason is None:
            standing = Standing.NEW
            why = reason(ReasonKind.NEW, "not tried yet: waits for the next scheduling cycle")
        else:
            standing = Standing.SKIPPED
            why = _core(job).prefixed(policy.skipping(job, queue) + ": ")
        entries.append(
            PendingEntry(
                position=position,
                job=job.id,
                priority=job.priority,
                effective_priority=policy.effective_priority(job, queue, now),
                interactive=job.interactive,
                standing=standing,
                reason=why,
                blocked_since=job.blocked_since,
                skip_in_s=skip_in_s,
            )
        )
    return entries


def _core(job: Job) -> Reason:
    """The reason the cycle gave the job when it last tried it."""
    if job.pending_reason is None:
        return reason(ReasonKind.CAPACITY, "blocked")
    return job.pending_reason


def _behind(queue: Queue, stop: str) -> Reason:
    kind = queue.stopped_policy or queue.policy.kind
    return reason(
        ReasonKind.BEHIND,
        f"waiting behind job {stop}, which is blocked and stops this {kind} queue",
        blocked_by=stop,
    )
