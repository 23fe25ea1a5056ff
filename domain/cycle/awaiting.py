"""A preemptor awaiting its victims: which still stop, and whether a try would change anything (pure).

A preemption holds room for its job until its victims stop. Claim looks at every waiting
preemptor first in a cycle (`refresh`); a preemptor still waiting for victims that all were
stopping then, none of which has stopped since (`State.awaiting_checked`,
`State.stops_ended`), is not looked at again. Allocate then asks `still_waiting` before it
tries one: most wait cycle after cycle, and their try would change nothing.
"""

from __future__ import annotations

from domain.cycle.fitting import Fitter, waiting_reason_held
from domain.cycle.parked import Parked, parked_if_kept, parked_of
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
    if unchanged(state, job) or _all_stopping(state, job):
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
    # cluster): one found waiting before is passed over at a glance, or on a lookup, while
    # nothing it could use changed (domain/cycle/parked.py); otherwise the plain attribute
    # checks first.
    if _at_a_glance(state, statement, job):
        return True
    if statement.tentative or not unchanged(state, job):
        return False
    parked = parked_of(state)
    if parked.passes_over(state, job):
        return True
    if not _holds_waiting_reason(job) or not fitter.waits_for_room(job):
        return False
    _park(state, fitter, parked, job, held_take_none=True)  # as waits_for_room found
    return True


def tried_still_waiting(state: State, statement: Statement, fitter: Fitter, job: Job) -> None:
    """After a try of the preemptor that found no size placeable and changed nothing: parks
    it if a walk reaching it now would ask `still_waiting` and get yes, or try it and change
    nothing (the reason it holds is the waiting one, it is not blocked)."""
    if statement.tentative or not job.awaiting:
        return
    if unchanged(state, job) and _holds_waiting_reason(job):
        _park(state, fitter, parked_of(state), job, held_take_none=False)


def started_waiting(state: State, statement: Statement, fitter: Fitter, job: Job) -> None:
    """After a try that started a preemption for the job: parks it, as `tried_still_waiting`
    would in the next cycle, once Claim finds its victims still stopping (only then do walks
    ask the parked set). Done here, at the cost of the cycle that issued the preemption, the
    cycle after a large wave of preemptions does not answer each of its preemptors in full."""
    if statement.tentative or not job.awaiting:
        return
    if _all_stopping(state, job) and _holds_waiting_reason(job):  # as just told to
        _park(state, fitter, parked_of(state), job, held_take_none=False)


def _at_a_glance(state: State, statement: Statement, job: Job) -> bool:
    """The answer of most asks in a cycle, from plain reads: the job is parked, no node's room
    grew and no node is a suspect (so `Parked.passes_over` says yes and changes nothing),
    Claim found it waiting for victims all stopping and no stop has ended since
    (`unchanged`), and no checkpoint is open. False says only that the full answer is
    needed; the glance changes nothing (it makes no parked set). On the 10,000-node
    benchmark it answers about 99% of the asks."""
    parked = parked_if_kept(state)
    return (
        parked is not None
        and job.id in parked.jobs
        and not parked.suspects
        and not state.node_index.grown
        and not state.stops_ended
        and job.id in state.awaiting_checked
        and not statement.tentative
    )


def _all_stopping(state: State, job: Job) -> bool:
    """Whether every victim the job awaits is still stopping."""
    # A loop, not all() over a generator: asked of many preemptors a cycle.
    for victim_id in job.awaiting:  # noqa: SIM110
        if not still_stopping(state, victim_id):
            return False
    return True


def _holds_waiting_reason(job: Job) -> bool:
    """Not blocked, holding room, and holding the reason a waiting preemptor is given for
    exactly the victims it awaits: a try that finds no size placeable changes none of it."""
    return job.blocked_since is None and bool(job.held) and waiting_reason_held(job) is not None


def _park(state: State, fitter: Fitter, parked: Parked, job: Job, held_take_none: bool) -> None:
    # The answers above may rest on the cycle's memo of shapes that found no room; parked,
    # the job is passed over in later cycles too, so no room is first found by looking.
    if not job.preemptible or state.limited_path(job.queue):
        return
    if fitter.finds_no_room(job, held_take_none):
        parked.park(state, job)
