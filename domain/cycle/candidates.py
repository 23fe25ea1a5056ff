"""The victim search's candidates: the steps of every admitted victim of a rule's queues (pure).

Admission is one verdict per look-alike victim within a listing: a rule's `admits` reads of
either job only its shape (`Job.shape`) and, of displacements, `dominating_superiors`
(`PreemptionRule.admits`), and so does the no-cycles check that asks the rules the other way
round. A victim with displacements of its own, or among the job's dominating superiors, is
judged alone; the per-victim filters (running, not stopping, not dispatched now) always are.
On the contended Alibaba trace 96% of the victims listed shared a shape already judged.

What a listing reads of a victim alone (its steps with their order keys, its first step's
tasks, its shape) is kept per victim across searches and cycles (`Listed`, with the
configuration in `State.configuration_memo`, never saved) and read again only when its
placements or start differ from those it was read from: on that trace a search lists about
1,700 running jobs, nearly all as the search before listed them. The memo decides nothing;
each entry is what reading the victim afresh would give. It is pruned of jobs no longer
running whenever it doubles (`ListedVictims`), so it grows with the running jobs listed,
not with the jobs that ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Protocol

from domain.cycle.displacement import dominating_superiors
from domain.cycle.framework import Cycle, PreemptionRule
from domain.cycle.node_sets import Order
from domain.cycle.release_room import RELEASE_EPSILON, ReleaseBound, exceeds_release_room
from domain.cycle.release_totals import NO_CAP, Cap
from domain.cycle.room import VictimStep, victim_steps
from domain.entities import ShapeKey
from domain.state import Job, JobStatus, State

Keyed = list[tuple[Order, VictimStep]]  # a victim's steps in order, each with its key
LISTED = "listed_victims"  # the memo's key in State.configuration_memo
PRUNE_FLOOR = 256  # listed victims kept before the first pruning


class Ordering(Protocol):
    """What reading a victim asks of the victim search: the order of its steps."""

    def step_order(self, step: VictimStep) -> Order:
        """The step's place in least disruption order (unique per step)."""
        ...


class Admission(Ordering, Protocol):
    """What a listing asks of the victim search: the two halves of `may_be_victim`, and
    the order of a victim's steps."""

    def may_stop(self, job: Job, victim: Job) -> bool:
        """The filters read from the victim alone: running, not stopping, not just dispatched."""
        ...

    def admitted(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        """The rule admits the victim, and the victim could not preempt the job right back."""
        ...


Release = tuple[float, float, float] | None  # what a queue may release (None: not bounded)


def victim_queues(
    cycle: Cycle, job: Job, rule: PreemptionRule, bound: ReleaseBound | None
) -> list[tuple[str, Release]]:
    """The rule's candidate queues, each with what it may release under a rule that bounds
    it (`bound`): a queue whose room refuses even the least request of its running jobs
    is left out, since every one of its victims would be refused."""
    queues: list[tuple[str, Release]] = []
    for queue_id in rule.candidate_queues(cycle, job):
        room = None if bound is None else bound.release_room(cycle, job, queue_id)
        if room is not None and exceeds_release_room(cycle.state.least_task(queue_id), room):
            continue
        queues.append((queue_id, room))
    return queues


def release_cap(room: Release) -> Cap:
    """The most, per resource, a walk may take of a queue with this release room: a release
    above the room (beyond `RELEASE_EPSILON`) is refused (`ReleaseLedger`), and amounts are
    whole numbers."""
    if room is None:
        return (NO_CAP, NO_CAP, NO_CAP)
    gpu, cpu, memory = (
        NO_CAP if amount >= NO_CAP else math.floor(amount + RELEASE_EPSILON) for amount in room
    )
    return (gpu, cpu, memory)


def candidate_steps(
    cycle: Cycle,
    search: Admission,
    job: Job,
    rule: PreemptionRule,
    queues: list[tuple[str, Release]],
) -> list[VictimStep]:
    """The steps of every admitted victim of the queues (`victim_queues`), in the search's
    least disruption order (`Admission.step_order`). With a rule that bounds what each queue
    may release, a victim's steps beyond that room are dropped first, before the costlier
    filters: the walk would refuse them anyway (a release the room refuses alone is refused
    after other victims too), so decisions are the same."""
    state = cycle.state
    superiors = dominating_superiors(cycle, job)
    verdicts: dict[ShapeKey, bool] = {}
    keyed: Keyed = []
    memo = listed_memo(state)
    entries, now = memo.entries, cycle.ts
    for queue_id, room in queues:
        for victim in (state.jobs[j] for j in sorted(state.queues[queue_id].running)):
            listed = entries.get(victim.id)
            if (  # whether the entry stands (`Listed`); asked of every victim listed
                listed is None
                or listed.victim is not victim
                or listed.started != victim.started_or(now)
                or listed.placements != victim.placements
            ):
                listed = list_victim(state, memo, search, victim, now)
            if room is not None:
                tasks = listed.first_tasks
                if tasks is None:
                    tasks = listed.first_tasks = first_tasks(victim)
                if exceeds_release_room(victim.per_task, room, tasks):
                    continue  # even its smallest step would be refused
            if not search.may_stop(job, victim):
                continue
            shape = look_alike(listed, superiors)
            if shape is None:
                admitted = search.admitted(job, victim, rule)
            else:
                found = verdicts.get(shape)
                if found is None:
                    found = verdicts[shape] = search.admitted(job, victim, rule)
                admitted = found
            if not admitted:
                continue
            own = listed.keyed
            if room is not None:
                own = within_room(own, room)
            keyed += own
    keyed.sort(key=_ORDER)  # keys are unique: the order `sort(key=step_order)` gives
    return [step for _, step in keyed]


_ORDER = itemgetter(0)


@dataclass(slots=True)
class Listed:
    """What a listing reads of a running victim alone, as of its placements and start. It
    stands while the victim is the same job with equal placements and start, where a
    victim not started yet is ordered as if it started at the cycle's time
    (`Job.started_or`, read by `victims.least_disruption`): its entry stands for that cycle
    only."""

    victim: Job
    placements: dict[str, int]
    started: int  # the start its order keys read
    shape: ShapeKey
    keyed: Keyed
    first_tasks: int | None = None  # read when a rule bounds what its queue may release


class ListedVictims:
    """The listed victims, by job id, kept with the configuration. Pruned of jobs no longer
    running (or no longer in the state) whenever it doubles, so it holds at most about
    twice the running jobs listed, never the jobs that ran before them."""

    __slots__ = ("entries", "prune_at")

    def __init__(self) -> None:
        self.entries: dict[str, Listed] = {}
        self.prune_at = PRUNE_FLOOR

    def keep(self, state: State, listed: Listed) -> None:
        entries = self.entries
        if len(entries) >= self.prune_at:
            jobs = state.jobs
            gone = [
                job_id
                for job_id, kept in entries.items()
                if jobs.get(job_id) is not kept.victim or kept.victim.status is not _RUNNING
            ]
            for job_id in gone:
                del entries[job_id]
            self.prune_at = max(PRUNE_FLOOR, 2 * len(entries))
        entries[listed.victim.id] = listed


_RUNNING = JobStatus.RUNNING


def listed_memo(state: State) -> ListedVictims:
    memo = state.configuration_memo.get(LISTED)
    if memo is None:
        memo = state.configuration_memo[LISTED] = ListedVictims()
    assert isinstance(memo, ListedVictims)
    return memo


def list_victim(
    state: State, memo: ListedVictims, search: Ordering, victim: Job, now: int
) -> Listed:
    """Reads the victim afresh at cycle time `now`, and keeps what it read. Its shape is the
    state's shared key (`State.shape_keys`), compared by identity."""
    listed = Listed(
        victim,
        dict(victim.placements),
        victim.started_or(now),
        state.shape_keys.shared(victim.shape(), True),
        [(search.step_order(step), step) for step in victim_steps(victim)],
    )
    memo.keep(state, listed)
    return listed


def look_alike(listed: Listed, superiors: frozenset[str]) -> ShapeKey | None:
    """What admission reads of the victim, or None when it must be judged alone: it has
    displacements of its own, or it is among the job's dominating superiors."""
    victim = listed.victim
    if victim.displaced_by or victim.id in superiors:
        return None
    return listed.shape


def first_tasks(victim: Job) -> int:
    """Tasks the victim's first step stops (all of a non-elastic job; else one halving)."""
    placed = sum(victim.placements.values())
    if not victim.is_elastic or placed <= victim.min_tasks:
        return placed
    return placed - max(victim.min_tasks, placed // 2)


def within_room(keyed: Keyed, room: tuple[float, float, float]) -> Keyed:
    """The prefix of a victim's steps whose release, counted from its first step, fits."""
    tasks = 0
    for position, (_, step) in enumerate(keyed):
        tasks += sum(count for _, count in step.nodes)
        if exceeds_release_room(step.victim.per_task, room, tasks):
            return keyed[:position]
    return keyed
