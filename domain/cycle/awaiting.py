"""A preemptor awaiting its victims: which still stop, and whether a try would change anything (pure).

A preemption holds room for its job until its victims stop. Claim looks at every waiting
preemptor first in a cycle (`refresh`); a preemptor still waiting for victims that all were
stopping then, none of which has stopped since (`State.awaiting_checked`,
`State.stops_ended`), is not looked at again. Allocate then asks `still_waiting` before it
tries one: most wait cycle after cycle, and their try would change nothing.
"""

from __future__ import annotations

from domain.cycle.fitting import Fitter, waiting_reason_held
from domain.cycle.statement import Statement
from domain.state import Job, State


def still_stopping(state: State, job_id: str) -> bool:
    victim = state.jobs.get(job_id)
    return victim is not None and bool(victim.stopping)


def unchanged(state: State, job: Job) -> bool:
    """Whether Claim found the job waiting for victims all still stopping, and none of them
    has stopped since."""
    ended = state.stops_ended  # empty in every cycle after Claim: asked then of each holder
    return job.id in state.awaiting_checked and (not ended or job.awaiting.isdisjoint(ended))


def refresh(state: State, statement: Statement, job: Job) -> None:
    """Drops from the job's awaited victims those no longer stopping; a preemptor that still
    waits for all of them (most, every cycle) keeps its set as it is."""
    if unchanged(state, job):
        return
    for victim_id in job.awaiting:  # a loop, not all(): asked of many preemptors a cycle
        if not still_stopping(state, victim_id):
            break
    else:
        return
    awaiting = frozenset(v for v in job.awaiting if still_stopping(state, v))
    statement.set(job, "awaiting", awaiting)


def still_waiting(state: State, statement: Statement, fitter: Fitter, job: Job) -> bool:
    """Whether trying the preemptor now would find it waiting for the same victims, for the
    reason it holds, and change nothing: Session._try would then return PREEMPTING with that
    reason. Its awaited victims are unchanged (`refresh` would keep them), no size fits
    (`Fitter.waits_for_room`), so each size's reason is the one `Fitter._capacity_reason`
    keeps for a preemptor whose awaited victims are the ones its reason names
    (`waiting_reason_held`)."""
    # Asked of every waiting preemptor a walk reaches (thousands a cycle on a large
    # cluster): the plain attribute checks first.
    if job.blocked_since is not None or not job.held or statement.tentative:
        return False
    if not unchanged(state, job) or waiting_reason_held(job) is None:
        return False
    return fitter.waits_for_room(job)
