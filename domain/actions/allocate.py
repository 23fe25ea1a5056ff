"""Allocate action: serve the most deprived queue one job at a time, as its policy allows (pure)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from enum import Enum

from domain.fairshare import OWN
from domain.framework import QueuePolicy, Verdict
from domain.session import Outcome, Session
from domain.state import Job, Queue, State

QueueKey = tuple[tuple[float, int, str], ...]


def deprivation(allocated: tuple[int, int, int], share: tuple[float, float, float]) -> float:
    """Allocation relative to fair share, by the most used resource (dominant share).

    A queue with no fair share at all (no entitlement now) ranks after every entitled one,
    even while it uses nothing: serving it first would hand it idle capacity that an
    entitled queue then has to reclaim, churn for nothing."""
    if not any(fair > 0 for fair in share):
        return float("inf")
    worst = 0.0
    for used, fair in zip(allocated, share, strict=True):
        if used <= 0:
            continue
        if fair <= 0:
            return float("inf")
        worst = max(worst, used / fair)
    return worst


def queue_key(session: Session, queue_id: str) -> QueueKey:
    """Hierarchical order: most deprived top-level queue first, then down its tree; the
    queue's own jobs compete with its children as one more child."""
    state = session.state
    path = list(state.ancestors(queue_id))
    key: list[tuple[float, int, str]] = []
    for queue in reversed(path):
        ratio = deprivation(queue.subtree_allocated.as_tuple(), queue.fair_share)
        key.append((ratio, -queue.priority, queue.id))
    own = state.queues[queue_id]
    key.append((deprivation(own.allocated.as_tuple(), own.own_fair_share), 0, OWN))
    return tuple(key)


def pending_in_order(state: State, queue: Queue, policy: QueuePolicy, now: int) -> Iterator[Job]:
    """The queue's pending jobs in the order they are tried: interactive first, then higher
    effective priority, then submission order (a requeued job keeps its submission order).

    Lazy: a cycle that stops at the head of a long queue looks at little more than the head.
    Each (interactive, priority) list is in submission order and a policy's effective priority
    never rises along it, so a list's keys run from its first job's to its last job's. Lists
    whose key ranges do not overlap simply follow one another (always so without aging); only
    overlapping ones are merged job by job.
    """
    spans: list[tuple[tuple[int, int], tuple[int, int], bool, list[tuple[int, str]]]] = []
    for (interactive, _priority), entries in queue.pending.lists():
        if entries:
            rank = 0 if interactive else 1
            first = policy.effective_priority(state.jobs[entries[0][1]], queue, now)
            last = policy.effective_priority(state.jobs[entries[-1][1]], queue, now)
            spans.append(((rank, -first), (rank, -last), interactive, entries))
    spans.sort(key=lambda span: (span[0], span[1]))
    group: list[tuple[bool, list[tuple[int, str]]]] = []
    group_end = (0, 0)
    for start, end, interactive, entries in spans:
        if group and start > group_end:
            yield from _merged(state, queue, policy, now, group)
            group = []
        group_end = max(group_end, end) if group else end
        group.append((interactive, entries))
    if group:
        yield from _merged(state, queue, policy, now, group)


def _merged(
    state: State,
    queue: Queue,
    policy: QueuePolicy,
    now: int,
    group: list[tuple[bool, list[tuple[int, str]]]],
) -> Iterator[Job]:
    if len(group) == 1:
        for _, job_id in group[0][1]:
            yield state.jobs[job_id]
        return
    streams = []
    for interactive, entries in group:

        def keyed(
            entries: list[tuple[int, str]] = entries, interactive: bool = interactive
        ) -> Iterator[tuple[tuple[int, int, int], str]]:
            for order, job_id in entries:
                rank = policy.effective_priority(state.jobs[job_id], queue, now)
                yield (0 if interactive else 1, -rank, order), job_id

        streams.append(keyed())
    for _, job_id in heapq.merge(*streams):
        yield state.jobs[job_id]


class _Next(Enum):
    """What the queue does after one of its jobs was tried."""

    REQUEUE = "requeue"  # something was committed: re-rank the queue among the others
    CONTINUE = "continue"  # nothing changed any queue's rank: try the queue's next job now
    STOP = "stop"  # the policy stops the queue for this cycle


class Allocate:
    name = "allocate"

    def execute(self, session: Session) -> None:
        state = session.state
        heap: list[tuple[QueueKey, str]] = []
        for queue_id in sorted(state.queues):
            queue = state.queues[queue_id]
            queue.stopped_by = None
            queue.stopped_policy = None
            if len(queue.pending):
                heap.append((queue_key(session, queue_id), queue_id))
        heapq.heapify(heap)
        cursors: dict[str, Iterator[Job]] = {}
        while heap:
            key, queue_id = heapq.heappop(heap)
            fresh = queue_key(session, queue_id)
            if fresh != key:
                # Keys only grow within a cycle (allocations only add), so a stale entry is
                # re-filed and the true minimum surfaces.
                heapq.heappush(heap, (fresh, queue_id))
                continue
            queue = state.queues[queue_id]
            cursor = cursors.get(queue_id)
            if cursor is None:
                policy = session.policy(queue)
                cursor = cursors[queue_id] = pending_in_order(state, queue, policy, session.ts)
            for job in cursor:
                step = self._serve(session, queue, job)
                if step is _Next.REQUEUE:
                    heapq.heappush(heap, (queue_key(session, queue_id), queue_id))
                if step is not _Next.CONTINUE:
                    break
        # Placed jobs leave the pending lists only now: the cursors above walk those lists.
        for job in session.placed:
            state.dequeue(job)

    def _serve(self, session: Session, queue: Queue, job: Job) -> _Next:
        """Tries one job and applies the queue policy's verdict if it is blocked."""
        outcome, reason = session.try_schedule(job)
        if outcome is Outcome.PLACED:
            return _Next.REQUEUE
        job.pending_reason = reason
        if outcome is Outcome.PREEMPTING:
            # Not blocked: its victims are stopping and what they free is held for it.
            job.blocked_since = None
            return _Next.REQUEUE
        if job.blocked_since is None:
            job.blocked_since = session.ts  # the first cycle in which it was found blocked
        policy = session.policy(queue)
        if policy.on_blocked(job, queue, session) is Verdict.STOP:
            queue.stopped_by = job.id
            queue.stopped_policy = policy.kind
            return _Next.STOP
        # A blocked try commits nothing, so every queue keeps its rank and this one stays first.
        return _Next.CONTINUE
