"""Reclaim: a queue within its fair share takes resources back from queues above theirs (pure).

Fair share (domain.fairshare) contains every queue's deserved quota, capped by its demand, so
a queue below its deserved quota with a blocked job is always entitled; reclaim also restores
the over-quota split (Run:AI's scheduler documentation: quotas 3 and 1 share idle GPUs 3:1), since the work-conserving
allocator lets a queue use idle capacity beyond its fair share that others may later want.

The comparison happens where the two queues' paths meet: below their lowest common ancestor,
every entity on the reclaimer's side (its queue's own jobs, then each enclosing subtree) must
stay within its fair share once the job runs, and every entity on the victim's side must be
above its fair share now and not below it once all victims have stopped. A parent's own jobs
are one entity among its children (the OWN slot of fairshare).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from domain.commands import PreemptReason
from domain.cycle.displacement import dominating_superiors
from domain.cycle.framework import CycleView
from domain.resources import Resources
from domain.state import Job, Queue, State

EPSILON = 1e-6  # fair shares are floats over integer amounts; this absorbs rounding only

# One side of a comparison: a queue, and whether it stands for its own jobs only (the OWN
# slot among its children) or for its whole subtree.
Entity = tuple[Queue, bool]
Amounts = tuple[int, int, int]
Asked = tuple[tuple[int, int], ...]  # (resource index, amount) per resource a job asks for
V = TypeVar("V")


class InFlight:
    """What preemptions already under way mean for each queue, per cycle: resources held for
    its pending jobs count as its own, tasks it is already stopping count as gone. Without
    this, a second reclaim in the same cycle (or before agents answer) would see the first's
    victims as still running and take a queue below its fair share."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._version = (-1, -1)
        self._own: dict[str, Amounts] = {}
        self._subtree: dict[str, Amounts] = {}

    def refresh(self, version: tuple[int, int]) -> None:
        # Stops and holds change when a Preempt or Dispatch is issued, or a hold is dropped
        # (which counts as a free); between cycles the session is new.
        if version != self._version:
            self._version = version
            self._own.clear()
            self._subtree.clear()

    def own(self, queue: Queue) -> Amounts:
        cached = self._own.get(queue.id)
        if cached is None:
            cached = self._own[queue.id] = (queue.held - queue.stopping).as_tuple()
        return cached

    def subtree(self, queue: Queue) -> Amounts:
        cached = self._subtree.get(queue.id)
        if cached is None:
            total = list(self.own(queue))
            for child in queue.children:
                for r, amount in enumerate(self.subtree(self._state.queues[child])):
                    total[r] += amount
            cached = self._subtree[queue.id] = (total[0], total[1], total[2])
        return cached


def in_flight(cycle: CycleView) -> InFlight:
    state = cycle.state
    memo = cycle.memo("reclaim", lambda: InFlight(state))
    memo.refresh(cycle.version())
    return memo


class _WhileUsagesStand(Generic[V]):
    """Values derived only from allocations, holds, stops and issued commands (and quotas,
    `queue.running`, the tree), kept while none of those changed: allocations, holds and
    stops bump the cycle's epoch, issued commands its version (the in-flight offsets). So a
    victim search's admission checks cost a lookup each instead of a walk of the tree."""

    def __init__(self) -> None:
        self.key: tuple[int, tuple[int, int]] = (-1, (-1, -1))
        self.found: dict[tuple[object, ...], V] = {}

    def get(self, cycle: CycleView, key: tuple[object, ...], compute: Callable[[], V]) -> V:
        now = (cycle.epoch(), cycle.version())
        if self.key != now:
            self.key = now
            self.found.clear()
        if key not in self.found:
            self.found[key] = compute()
        return self.found[key]


# The three caches, named once: subscripting a generic on every call costs typing's lookup.
_Usages = _WhileUsagesStand[tuple[Amounts, tuple[float, float, float]]]
_Candidates = _WhileUsagesStand[tuple[str, ...]]
_Admissions = _WhileUsagesStand[bool]


def _usage(cycle: CycleView, entity: Entity) -> tuple[Amounts, tuple[float, float, float]]:
    """What the entity has committed (allocated, less stopping, plus held) and its fair share."""
    usages = cycle.memo("reclaim_usage", _Usages)
    queue, own = entity
    return usages.get(cycle, (queue.id, own), lambda: _usage_now(cycle, entity))


def cached_candidates(
    cycle: CycleView, key: tuple[object, ...], compute: Callable[[], Iterator[str]], own: str
) -> Iterator[str]:
    """The candidate queues under `key` (rule, resources asked) but the preemptor's `own`
    queue: `compute` lists every queue that qualifies (its own included), so one list serves
    the preemptors of every queue, and a blocked job's searches and explain's reasons cost a
    lookup instead of a walk over every queue."""
    memo = cycle.memo("reclaim_candidates", _Candidates)
    found = memo.get(cycle, key, lambda: tuple(compute()))
    return (queue_id for queue_id in found if queue_id != own)


def admits_victim(
    cycle: CycleView,
    rule: str,
    job: Job,
    victim: Job,
    admits_queue: Callable[[CycleView, Job, str], bool],
) -> bool:
    """A reclaim rule's verdict on a victim: never one of the job's own queue; then the
    rule's verdict on the victim's queue (`admits_queue`), kept per rule, preemptor's queue,
    request and victim queue: it reads only the two queues' usages, fair shares and deserved
    quotas and the request, so every running job of one victim queue gets the same verdict
    and a walk over them costs one check. Explicit PAI rules, priority and interactive
    dominate fairness: never take back from who displaced the job by one, directly or
    through a chain of preemptions (domain/cycle/displacement.py). That is
    asked second: the queues' verdict is a lookup, and asked the other way round (could the
    victim take back?) it is mostly no."""
    if victim.queue == job.queue:
        return False
    key = (rule, job.queue, job.per_task, job.tasks, victim.queue)
    admissions = cycle.memo("reclaim_admissions", _Admissions)
    if not admissions.get(cycle, key, lambda: admits_queue(cycle, job, victim.queue)):
        return False
    return victim.id not in dominating_superiors(cycle, job)


def _usage_now(cycle: CycleView, entity: Entity) -> tuple[Amounts, tuple[float, float, float]]:
    # The cycle's first read of fair shares may be here; the memo above is the cycle's own,
    # so a cached usage (and the capped demand read beside it) was read after this ran.
    cycle.state.update_fair_shares()
    queue, own = entity
    flight = in_flight(cycle)
    if own:
        base, offset, share = queue.allocated.as_tuple(), flight.own(queue), queue.own_fair_share
    else:
        base, offset, share = (
            queue.subtree_allocated.as_tuple(),
            flight.subtree(queue),
            queue.fair_share,
        )
    used = (base[0] + offset[0], base[1] + offset[1], base[2] + offset[2])
    return used, share


def _demand(entity: Entity) -> tuple[float, float, float]:
    queue, own = entity
    if own:
        gpu, cpu, memory = queue.demand.as_tuple()
        return (float(gpu), float(cpu), float(memory))
    return queue.capped_demand


def below_meeting_point(state: State, queue_id: str, other_id: str) -> list[Entity]:
    """The entities of `queue_id`'s side strictly below where it meets `other_id`'s path."""
    others = {queue.id for queue in state.ancestors(other_id)}
    entities: list[Entity] = [(state.queues[queue_id], True)]
    if queue_id in others:
        return entities  # the other is below this queue: only its own jobs compete
    for queue in state.ancestors(queue_id):
        if queue.id in others:
            break
        entities.append((queue, False))
    return entities


def requested(cycle: CycleView, job: Job) -> Asked:
    """(resource index, amount) for each resource the whole job asks for; kept per request
    for the cycle (a job's request never changes), as every rule check asks again."""
    memo: dict[tuple[Resources, int], Asked] = cycle.memo("reclaim_requested", dict)
    key = (job.per_task, job.tasks)  # the job's request: per_task x tasks
    found = memo.get(key)
    if found is None:
        tasks = job.tasks
        amounts = enumerate(job.per_task.as_tuple())
        found = memo[key] = tuple((r, amount * tasks) for r, amount in amounts if amount > 0)
    return found


class Reclaim:
    reason: PreemptReason = "reclaim"
    explains = (
        "reclaim: the preemptor's queue was below its deserved quota with a blocked job, and "
        "took resources back from a queue above its fair share (never below that queue's fair share)"
    )
    explicit = False  # a PAI rule: dominates fairness
    fairness = True

    def applies(self, cycle: CycleView, job: Job) -> bool:
        queue = cycle.state.queues[job.queue]
        return self._within_share(cycle, job, [(queue, True)])

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        asked = requested(cycle, job)
        key = ("reclaim", tuple(r for r, _ in asked))
        return cached_candidates(cycle, key, lambda: self._candidates(cycle, asked), job.queue)

    def _candidates(self, cycle: CycleView, asked: Asked) -> Iterator[str]:
        for queue_id in sorted(cycle.state.queues):
            queue = cycle.state.queues[queue_id]
            if not queue.running:
                continue
            used, share = _usage(cycle, (queue, True))
            if any(used[r] > share[r] + EPSILON for r, _ in asked):
                yield queue_id

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        return admits_victim(cycle, "reclaim", job, victim, self._admits_queue)

    def _admits_queue(self, cycle: CycleView, job: Job, victim_queue: str) -> bool:
        state = cycle.state
        if not self._within_share(cycle, job, below_meeting_point(state, job.queue, victim_queue)):
            return False
        asked = requested(cycle, job)
        for entity in below_meeting_point(state, victim_queue, job.queue):
            used, share = _usage(cycle, entity)
            if not any(used[r] > share[r] + EPSILON for r, _ in asked):
                return False
        return True

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        """No victim-side entity ends below its fair share in a resource it is short of.

        Runs with the victims already released by the selector's statement. A resource the
        entity's fair share fully covers (share >= demand) is not contended for it, so using
        some of it does not make the entity poorer than fair; counting it would forbid any
        reclaim of jobs that also ask for plentiful cpu or memory.
        """
        state = cycle.state
        seen: set[tuple[str, bool]] = set()
        for victim in victims:
            for entity in below_meeting_point(state, victim.queue, job.queue):
                key = (entity[0].id, entity[1])
                if key in seen:
                    continue
                seen.add(key)
                used, share = _usage(cycle, entity)
                demand = _demand(entity)
                for r in range(3):
                    contended = share[r] < demand[r] - EPSILON
                    if contended and used[r] < share[r] - EPSILON:
                        return False
        return True

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        return False  # no verdict reads a job's priority

    def release_room(self, cycle: CycleView, job: Job, queue_id: str) -> tuple[float, float, float]:
        """How much stopping `queue_id`'s jobs may release before `allows_after` refuses: per
        resource, the least, over the victim side's entities contended for it, of what the
        entity uses above its fair share (domain.cycle.release_room.ReleaseBound)."""
        room = [math.inf, math.inf, math.inf]
        for entity in below_meeting_point(cycle.state, queue_id, job.queue):
            used, share = _usage(cycle, entity)
            demand = _demand(entity)
            for r in range(3):
                if share[r] < demand[r] - EPSILON:
                    room[r] = min(room[r], used[r] - share[r])
        return (room[0], room[1], room[2])

    def _within_share(self, cycle: CycleView, job: Job, entities: list[Entity]) -> bool:
        """Every entity stays within its fair share once the whole job runs."""
        asked = requested(cycle, job)
        for entity in entities:
            used, share = _usage(cycle, entity)
            if any(used[r] + amount > share[r] + EPSILON for r, amount in asked):
                return False
        return True
