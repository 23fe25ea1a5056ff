"""Allocate action: serve the most deprived queue one job at a time, as its policy allows (pure)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from enum import Enum

from domain.actions.reclaim_again import note_blocked, note_dequeued
from domain.actions.settled_walk import forget_idle, walk
from domain.cycle.framework import Cycle, Outcome, QueuePolicy, Verdict
from domain.cycle.ordering import QueueKey, QueueKeys
from domain.reasons import Reason
from domain.state import Job, Queue


class _Next(Enum):
    """What the queue does after one of its jobs was tried."""

    REQUEUE = "requeue"  # something was committed: re-rank the queue among the others
    CONTINUE = "continue"  # nothing changed any queue's rank: try the queue's next job now
    STOP = "stop"  # the policy stops the queue for this cycle


class Allocate:
    name = "allocate"

    def execute(self, cycle: Cycle) -> None:
        state = cycle.state
        statement = cycle.statement
        heap: list[tuple[QueueKey, str]] = []
        # The statement's epoch when each queue's entry in the heap was keyed: a key reads
        # only allocations and fair shares, and every change to allocations bumps the epoch
        # (fair shares do not change within the action), so an entry keyed at the current
        # epoch is fresh without computing it again.
        keyed_at: dict[str, int] = {}
        # Only the queues a cycle may have stopped and those with a pending job are visited
        # (State.stopped_queues, State.pending_queues), so idle queues cost nothing.
        for queue_id in sorted(state.stopped_queues):
            queue = state.queues[queue_id]
            if queue.stopped_by is not None or queue.stopped_policy is not None:
                statement.set(queue, "stopped_by", None)
                statement.set(queue, "stopped_policy", None)
        state.stopped_queues.clear()
        waiting = sorted(state.pending_queues)
        forget_idle(cycle, waiting)
        queue_key = QueueKeys(state).key
        # A lone queue is never ranked against another (a requeue with an empty heap keeps
        # it first), so its key is not computed.
        lone = len(waiting) == 1
        for queue_id in waiting:
            heap.append((() if lone else queue_key(queue_id, statement.epoch), queue_id))
            keyed_at[queue_id] = statement.epoch
        heapq.heapify(heap)
        cursors: dict[str, tuple[Iterator[Job], QueuePolicy]] = {}
        known_verdict, still_waiting = cycle.known_verdict, cycle.still_waiting
        noted: set[str] = set()  # queues whose first blocked job reclaim-again has
        while heap:
            key, queue_id = heapq.heappop(heap)
            if keyed_at[queue_id] != statement.epoch:
                fresh = queue_key(queue_id, statement.epoch)
                if fresh != key:
                    # Keys only grow within a cycle (allocations only add), so a stale entry
                    # is re-filed and the true minimum surfaces.
                    heapq.heappush(heap, (fresh, queue_id))
                    keyed_at[queue_id] = statement.epoch
                    continue
            queue = state.queues[queue_id]
            walking = cursors.get(queue_id)
            if walking is None:
                policy = cycle.policy(queue)
                walking = cursors[queue_id] = (walk(cycle, queue, policy), policy)
            cursor, policy = walking
            for job in cursor:
                if job.awaiting and still_waiting(job):
                    continue  # its try would leave it waiting for its victims, as it is
                known = known_verdict(job)
                if known is not None and job.blocked_since is not None:
                    # A look-alike of a job found blocked in this cycle (which noted the
                    # queue), itself blocked since an earlier cycle: _serve's steps for it
                    # come down to its reason, if another, and the policy's verdict.
                    if job.pending_reason is not known[1]:
                        statement.set(job, "pending_reason", known[1])
                    if policy.on_blocked(job, queue, cycle) is not _STOP:
                        continue
                    self._stop(cycle, queue, policy, job)
                    break
                step = self._serve(cycle, queue, policy, job, noted, known)
                if step is _CONTINUE:
                    continue
                if step is _REQUEUE:
                    if not heap:
                        continue  # no other queue to rank it against: it stays first
                    heapq.heappush(heap, (queue_key(queue_id, statement.epoch), queue_id))
                    keyed_at[queue_id] = statement.epoch
                break
        # Placed jobs leave the pending lists only now: the cursors above walk those lists.
        walked = statement.lasting
        for job in cycle.placed:
            statement.dequeue(job)
        note_dequeued(cycle, walked)

    def _serve(
        self,
        cycle: Cycle,
        queue: Queue,
        policy: QueuePolicy,
        job: Job,
        noted: set[str],
        known: tuple[Outcome, Reason | None] | None,
    ) -> _Next:
        """Tries one job (unless its verdict is `known`) and applies the queue policy's
        verdict if it is blocked. Reads enum members from module constants: it runs for many
        of the pending jobs a cycle reaches."""
        statement = cycle.statement
        lasting = statement.lasting
        outcome, reason = known or cycle.try_schedule(job)
        if outcome is _PLACED:
            return _REQUEUE
        if job.pending_reason is not reason:  # a look-alike's verdict is the same object
            statement.set(job, "pending_reason", reason)
        if outcome is _PREEMPTING:
            # Not blocked: its victims are stopping and what they free is held for it.
            if job.blocked_since is not None:
                statement.set(job, "blocked_since", None)
            # A job still waiting for the same victims changed nothing lasting, so no
            # queue's rank either: re-filing the queue would only pop it again.
            if statement.lasting != lasting:
                cycle.started_waiting(job)
                return _REQUEUE
            cycle.tried_still_waiting(job)
            return _CONTINUE
        if job.queue not in noted:  # only each queue's first blocked job is kept
            noted.add(job.queue)
            note_blocked(cycle, job)
        if job.blocked_since is None:
            # The first cycle in which it was found blocked.
            statement.set(job, "blocked_since", cycle.ts)
        if policy.on_blocked(job, queue, cycle) is _STOP:
            self._stop(cycle, queue, policy, job)
            return _Next.STOP
        # A blocked try commits nothing, so every queue keeps its rank and this one stays first.
        return _CONTINUE

    @staticmethod
    def _stop(cycle: Cycle, queue: Queue, policy: QueuePolicy, job: Job) -> None:
        """The policy stops the queue at its blocked job for this cycle."""
        cycle.statement.set(queue, "stopped_by", job.id)
        cycle.statement.set(queue, "stopped_policy", policy.kind)
        cycle.state.stopped_queues.add(queue.id)


# Read once: an enum member read through its class costs a lookup, and _serve runs per job.
_PLACED, _PREEMPTING = Outcome.PLACED, Outcome.PREEMPTING
_STOP = Verdict.STOP
_CONTINUE, _REQUEUE = _Next.CONTINUE, _Next.REQUEUE
