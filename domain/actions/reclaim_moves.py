"""Reclaim combined with moves: stop some jobs and move others when only both make room (pure).

A resolver, tried for a job that cannot be placed, when consolidation is on. A queue entitled
to reclaim (a fairness rule applies) first gets the plain victim search; if that finds no
set, victims are taken one at a time in least disruption order (a victim the rule forbids is
skipped), and after each, consolidation plans moves onto capacity that is free *now* (never
onto nodes whose room only frees once a victim stops). The first combination that lets the
job fit is issued: victims stop (reason of the rule), moved jobs are dispatched at their new
place before their old tasks stop (reason `consolidation`), and the room is held for the job.
Only for a queue below its deserved quota (the promise it keeps). Bounded: at most
MAX_VICTIMS victims, and a bounded move plan only once the total free room could hold the
job; at most MAX_PLANS jobs planned per cycle, and a job shape whose plan failed is not planned again while nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from domain.actions.consolidate import Move, carry_out, free_room, plan_moves
from domain.cycle.candidates import victim_queues
from domain.cycle.displacement import note_taken_back, superiors_key, takes_back
from domain.cycle.framework import Cycle, Outcome, PreemptionRule
from domain.cycle.release_room import (
    RELEASE_EPSILON,
    ReleaseLedger,
    ReleaseRoom,
    exceeds_release_room,
    release_bound,
)
from domain.cycle.victims import least_disruption
from domain.placement import Plan
from domain.resources import Resources
from domain.rules.reclaim_deserved import below_deserved
from domain.state import Job, State

MAX_VICTIMS = 16
MAX_PLANS = 2


class _Budget:
    """Plans made in this cycle, and shapes whose plan failed (with the
    cycle's lasting changes then: a plan is tried in a checkpoint and rolled back)."""

    def __init__(self) -> None:
        self.plans = 0
        self.failed: dict[tuple[object, ...], int] = {}


def reclaim_with_moves(cycle: Cycle, job: Job) -> Outcome | None:
    """Stops and moves jobs to make the whole job fit, or changes nothing and returns None."""
    if not cycle.state.cluster.consolidation or job.awaiting:
        return None
    budget = cycle.memo("reclaim_moves", _Budget)
    if not below_deserved(cycle, job):
        return None
    for rule in cycle.plugins.preemption_rules:
        if not rule.fairness or rule.explicit or not cycle.rule_applies(rule, job):
            continue
        if cycle.preempt_for(job, rule):
            return Outcome.PREEMPTING
        if budget.plans >= MAX_PLANS:
            continue  # most blocked tries of a cycle come after its plans: no shape is made
        shape: tuple[object, ...] = (type(rule).__name__, job.queue, job.priority)
        shape += (job.per_task, job.tasks, job.node_selector, job.module, job.preemptible)
        shape += (superiors_key(cycle, job),)
        changes = cycle.lasting_changes()
        if changes is not None and budget.failed.get(shape) == changes:
            continue
        budget.plans += 1
        found = _plan(cycle, job, rule)
        if found is None and changes is not None:
            budget.failed[shape] = changes
        if found is not None:
            victims, moves, plan = found
            issued = cycle.statement.checkpoint()
            stops = []
            for victim in victims:
                stops += cycle.stop(victim, rule.reason, by=job.id, emit=False)
                cycle.statement.set(job, "awaiting", job.awaiting | {victim.id})
            carry_out(cycle, job, moves, plan)  # moved jobs' new places first
            cycle.statement.emit(stops)
            if takes_back(cycle, job, rule, victims):
                cycle.statement.rollback(issued)  # a victim would take the room right back
                note_taken_back(cycle, job, victims)
                continue
            cycle.statement.accept(issued)
            return Outcome.PREEMPTING
    return None


def could_free_enough(
    state: State, job: Job, request: Resources, rooms: Mapping[str, ReleaseRoom]
) -> bool:
    """Whether the free room the job may use, with all that its candidate queues may release
    (`rooms`: those `victim_queues` keeps) added, could hold the whole job: a plan moves
    jobs only once the victims taken so far leave that much free, and they release at most
    their queues' rooms (each victim taken is one the ledger let through, and the ledger
    counts down from the room). Asked before any victim is judged: on a full cluster most
    plans end here (ITP: about three in four)."""
    most = [float(amount) for amount in free_room(state, job).as_tuple()]
    for room in rooms.values():
        for r in range(3):
            most[r] += max(0.0, room[r]) + RELEASE_EPSILON
    asked = request.as_tuple()
    return all(asked[r] <= most[r] for r in range(3))


def _plan(
    cycle: Cycle, job: Job, rule: PreemptionRule
) -> tuple[list[Job], list[Move], Plan] | None:
    state = cycle.state
    statement = cycle.statement
    bound = release_bound(state, rule)
    # A queue whose room refuses even its least task is left out: it releases nothing.
    queues = victim_queues(cycle, job, rule, bound)
    rooms = {queue_id: room for queue_id, room in queues if room is not None}
    request = job.per_task * job.tasks
    if bound is not None and not could_free_enough(state, job, request, rooms):
        return None
    admitted: list[Job] = []
    for queue_id, room in queues:
        # A victim whose release the queue's room refuses is refused after others too (as in
        # the victim search): it is dropped here rather than stopped and given back.
        for victim in (state.jobs[j] for j in sorted(state.queues[queue_id].running)):
            if room is not None and exceeds_release_room(
                victim.per_task, room, victim.placed_tasks
            ):
                continue
            if cycle.may_be_victim(job, victim, rule):
                admitted.append(victim)
    candidates = sorted(admitted, key=lambda victim: least_disruption(victim, cycle.ts))
    everything = statement.checkpoint()
    taken: list[Job] = []
    freed: set[str] = set()
    found: tuple[list[Job], list[Move], Plan] | None = None
    releases = ReleaseLedger(rooms)  # what each queue may release, less the victims taken
    for victim in candidates:
        if len(taken) >= MAX_VICTIMS:
            break
        if releases.refuses(victim, victim.placed_tasks):
            continue  # the rule would refuse it after those taken: not tried
        trial = statement.checkpoint()
        placed = sorted(victim.placements.items())
        for node_id, tasks in placed:
            statement.unplace(victim, node_id, tasks)
        if not rule.allows_after(cycle, job, [victim]):
            statement.rollback(trial)  # forbidden: skipped, not the end
            continue
        taken.append(victim)
        releases.took(victim, sum(tasks for _, tasks in placed))
        freed |= {node_id for node_id, _ in placed}
        if not request.fits_in(free_room(state, job)):
            continue  # not even the total free room would hold it yet: plan nothing
        planned = plan_moves(cycle, job, job.tasks, frozenset(freed))
        if planned is not None and rule.allows_after(cycle, job, taken):
            found = (list(taken), planned[0], planned[1])
            break
    statement.rollback(everything)
    return found
