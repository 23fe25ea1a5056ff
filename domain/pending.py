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

from domain.actions.allocate import pending_in_order
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.policies.balance import Balance
from domain.policies.intelligent import HIGH
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
    reason: str  # a sentence a person can act on
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
    for position, job in enumerate(pending_in_order(state, queue, policy, now), start=1):
        skip_in_s = None
        if behind:
            standing = Standing.BEHIND
            reason = _behind(queue, stop or "")
        elif job.id == stop:
            standing = Standing.BLOCKING
            skip_in_s = _balance_left(job, queue, now)
            reason = _blocking(job, queue, skip_in_s)
            behind = True
        elif job.awaiting:
            standing = Standing.PREEMPTING
            reason = f"preempting {', '.join(sorted(job.awaiting))} to make room; their resources are held for it"
        elif job.pending_reason is None:
            standing = Standing.NEW
            reason = "not tried yet: waits for the next scheduling cycle"
        else:
            standing = Standing.SKIPPED
            reason = _skipped(job, queue)
        entries.append(
            PendingEntry(
                position=position,
                job=job.id,
                priority=job.priority,
                effective_priority=policy.effective_priority(job, queue, now),
                interactive=job.interactive,
                standing=standing,
                reason=reason,
                blocked_since=job.blocked_since,
                skip_in_s=skip_in_s,
            )
        )
    return entries


def _balance_left(job: Job, queue: Queue, now: int) -> float | None:
    if queue.policy.kind != "balance":
        return None
    due = Balance().skips_at(job, queue)
    return None if due is None else max(0, due - now) / 1000


def _blocking(job: Job, queue: Queue, skip_in_s: float | None) -> str:
    why = job.pending_reason or "blocked"
    kind = queue.stopped_policy or queue.policy.kind
    if kind == "balance" and skip_in_s is not None:
        return f"blocked at the head of a balance queue, {skip_in_s:g} s left before balance skips it: {why}"
    if kind == "intelligent":
        return f"blocked with priority {job.priority} >= {HIGH}, so intelligent does not skip it: {why}"
    return f"blocked at the head of a {kind} queue: {why}"


def _behind(queue: Queue, stop: str) -> str:
    kind = queue.stopped_policy or queue.policy.kind
    return f"waiting behind job {stop}, which is blocked and stops this {kind} queue"


def _skipped(job: Job, queue: Queue) -> str:
    kind = queue.policy.kind
    why = job.pending_reason or "blocked"
    if kind == "balance":
        return f"blocked for over {queue.policy.balance_timeout_s} s, so balance skips it: {why}"
    if kind == "intelligent":
        return f"blocked with priority below {HIGH}, so intelligent skips it: {why}"
    return f"blocked, so {kind} skips it: {why}"
