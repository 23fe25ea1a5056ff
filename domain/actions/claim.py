"""Claim action: a preemptor whose victims have all stopped takes its held room first (pure).

A preemption (or consolidation) holds the room it frees for its job. If the job then waited
for its queue's policy to reach it, a job requeued ahead of it (say, preempted meanwhile by
another queue) could block the queue and leave that room idle for as long as it is blocked.
The room was granted when the preemption was decided, so the job is placed on it as soon as
its victims are gone, before Allocate serves anyone (contract §6: once the victims stop,
the preemptor is placed). If it no longer fits (a node was lost), Allocate retries it in
its queue's order.
"""

from __future__ import annotations

from domain.cycle.framework import Cycle
from domain.state import JobStatus


class Claim:
    name = "claim"

    def execute(self, cycle: Cycle) -> None:
        state = cycle.state
        ready = []
        still: set[str] = set()
        # Unsorted: each refresh changes only its own job's awaited victims, so the order
        # of these steps changes no outcome; the ready ones are then taken in queue order.
        for job_id in state.holders:
            job = state.jobs.get(job_id)
            if job is None or job.status is not JobStatus.PENDING or not job.held:
                continue
            # Not looked at again if every victim it awaits was stopping when Claim last
            # looked and none has stopped since (domain/cycle/awaiting.py, `refresh`).
            cycle.refresh_awaiting(job)
            if job.awaiting:
                still.add(job_id)
            else:
                ready.append(job)
        # No stop ends later in a cycle (only events and Settle, before Claim, end one).
        state.awaiting_checked = still
        state.stops_ended.clear()
        for job in sorted(ready, key=lambda job: job.pending_key()):
            for tasks in cycle.sizes(job):
                attempt = cycle.fit(job, tasks)
                if attempt.plan is not None:
                    cycle.dispatch(job, attempt.plan)
                    cycle.statement.dequeue(job)
                    break
