"""Allocate action: serve the most deprived queue one job at a time, as its policy allows (pure)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from domain.fairshare import OWN
from domain.framework import Verdict
from domain.session import Outcome, Session
from domain.state import Job, Queue

QueueKey = tuple[tuple[float, int, str], ...]


def deprivation(allocated: tuple[int, int, int], share: tuple[float, float, float]) -> float:
    """Allocation relative to fair share, by the most used resource (dominant share)."""
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


def pending_in_order(session: Session, queue: Queue) -> Iterator[Job]:
    """The queue's pending jobs: interactive first, then by effective priority and submission."""
    state = session.state
    policy = session.policy(queue)
    now = session.ts
    streams = []
    for (interactive, _priority), entries in queue.pending.lists():
        if not entries:
            continue

        def keyed(
            entries: list[tuple[int, str]] = entries, interactive: bool = interactive
        ) -> Iterator[tuple[tuple[int, int, int], str]]:
            for order, job_id in entries:
                job = state.jobs[job_id]
                rank = policy.effective_priority(job, queue, now)
                yield (0 if interactive else 1, -rank, order), job_id

        streams.append(keyed())
    for _, job_id in heapq.merge(*streams):
        yield state.jobs[job_id]


class Allocate:
    name = "allocate"

    def execute(self, session: Session) -> None:
        state = session.state
        heap: list[tuple[QueueKey, str]] = []
        for queue_id in sorted(state.queues):
            queue = state.queues[queue_id]
            queue.stopped_by = None
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
                cursor = cursors[queue_id] = pending_in_order(session, queue)
            job = next(cursor, None)
            if job is None:
                continue
            if self._serve(session, queue, job):
                heapq.heappush(heap, (queue_key(session, queue_id), queue_id))
        for job in session.placed:
            state.dequeue(job)

    def _serve(self, session: Session, queue: Queue, job: Job) -> bool:
        """Tries one job; True when the queue may go on to its next job this cycle."""
        outcome, reason = session.try_schedule(job)
        if outcome is Outcome.PLACED:
            return True
        job.pending_reason = reason
        if outcome is Outcome.PREEMPTING:
            job.blocked_since = None
            return True
        if job.blocked_since is None:
            job.blocked_since = session.ts
        verdict = session.policy(queue).on_blocked(job, queue, session)
        if verdict is Verdict.STOP:
            queue.stopped_by = job.id
            return False
        return True
