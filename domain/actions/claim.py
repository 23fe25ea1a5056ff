"""Claim action: a preemptor whose victims have all stopped takes its held room first (pure).

A preemption (or consolidation) holds the room it frees for its job. If the job then waited
for its queue's policy to reach it, a job requeued ahead of it (say, preempted meanwhile by
another queue) could block the queue and leave that room idle for as long as it is blocked.
The room was granted when the preemption was decided, so the job is placed on it as soon as
its victims are gone, before Allocate serves anyone (contract §6: once the victims stop,
the preemptor is placed). If it no longer fits (a node was lost), Allocate retries it in
its queue's order.

Claim steps only the holders that may have changed since it last looked: those it has not
found waiting for victims all still stopping, those awaiting a victim whose stop ended since
(`State.awaited_by`), and those whose awaited victims were set since (`State.awaiting_set`).
Every other holder is known to wait as it did, without a step: a cycle costs what changed,
not how many preemptions are in flight.
"""

from __future__ import annotations

from domain.allocation import STOPS_ENDED_MAX
from domain.cycle.framework import Cycle
from domain.state import JobStatus, State


class Claim:
    name = "claim"

    def execute(self, cycle: Cycle) -> None:
        state = cycle.state
        ready = []
        unchanged, again = _to_look_at(state)
        # Unsorted: each refresh changes only its own job's awaited victims, so the order
        # of these steps changes no outcome; the ready ones are then taken in queue order.
        for job_id in again:
            job = state.jobs.get(job_id)
            if job is None or job.status is not JobStatus.PENDING or not job.held:
                continue
            # Not looked at again if every victim it awaits was stopping when Claim last
            # looked and none has stopped since (domain/cycle/awaiting.py, `refresh`).
            cycle.refresh_awaiting(job)
            if job.awaiting:
                unchanged.add(job_id)
                for victim_id in job.awaiting:
                    state.awaited_by.setdefault(victim_id, set()).add(job_id)
            else:
                ready.append(job)
        # No stop ends later in a cycle (only events and Settle, before Claim, end one).
        state.awaiting_checked = unchanged
        state.stops_ended.clear()
        for job in sorted(ready, key=lambda job: job.pending_key()):
            for tasks in cycle.sizes(job):
                attempt = cycle.fit(job, tasks)
                if attempt.plan is not None:
                    cycle.dispatch(job, attempt.plan)
                    cycle.statement.dequeue(job)
                    break


def _to_look_at(state: State) -> tuple[set[str], set[str]]:
    """The holders known to wait as they did when Claim last looked, and those to look at
    again. A holder stays known while each victim it awaited was stopping then, none has
    stopped since and its awaited victims were not set since: `refresh` would keep them.
    Set operations only: the holders in flight are not walked one by one."""
    holders = state.holders
    again = holders - state.awaiting_checked
    awaited_by = state.awaited_by
    for victim_id in state.stops_ended:
        awaiting = awaited_by.pop(victim_id, None)
        if awaiting:
            again |= awaiting & holders
    if len(state.awaiting_set) >= STOPS_ENDED_MAX:
        again = set(holders)  # too many were set to note each: every holder again
    elif state.awaiting_set:
        again |= state.awaiting_set & holders
    state.awaiting_set.clear()
    return (state.awaiting_checked & holders) - again, again
