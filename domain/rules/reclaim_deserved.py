"""Reclaim by deserved quota: the fallback of reclaim when no fair-share victim set exists (pure).

Whole jobs, fragmented nodes or quotas that add up to more than the cluster can leave no set
of victims that keeps every victim queue at its fair share. Then a queue may also take from a
queue that is above its *deserved quota*, as long as the reclaimer ends within its own
deserved quota and the victim queue does not end below its deserved quota (so that the
guarantee holds for both, and neither could take the resources back: no preemption cycle).
The comparison is made below the two queues' meeting point, as for reclaim
(domain.rules.reclaim). See docs/quotas.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.quota import UNLIMITED
from domain.rules.reclaim import EPSILON, Entity, _requested, _usage, below_meeting_point
from domain.state import Job, State


def deserved(state: State, entity: Entity) -> tuple[int, int, int]:
    """The entity's deserved quota (UNLIMITED allowed): its queue's, or for a parent's own
    jobs what the parent's quota leaves after its children's."""
    queue, own = entity
    if own and queue.children:
        return queue.quota.own_quota([state.queues[c].quota for c in queue.children])
    return queue.quota.quota


def guarded(state: State, job: Job) -> list[tuple[int, int]]:
    """(resource index, amount) the job asks for in which its queue deserves something: the
    fallback restores a guarantee, and a queue with no deserved quota of a resource (e.g.
    cpu it does not mention) has none to restore there."""
    quota = deserved(state, (state.queues[job.queue], True))
    return [(r, amount) for r, amount in _requested(job) if quota[r] != 0]


def _above(used: int, quota: int) -> bool:
    return quota != UNLIMITED and used > quota + EPSILON


class ReclaimDeserved:
    reason: PreemptReason = "reclaim"
    explains = (
        "or, where whole jobs or oversubscribed quotas leave no such victims, from a queue "
        "above its deserved quota (never below it), the reclaimer ending within its own"
    )
    explicit = False
    fairness = True

    def applies(self, cycle: CycleView, job: Job) -> bool:
        queue = cycle.state.queues[job.queue]
        return bool(guarded(cycle.state, job)) and self._within_deserved(
            cycle, job, [(queue, True)]
        )

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        state = cycle.state
        asked = guarded(state, job)
        for queue_id in sorted(state.queues):
            queue = state.queues[queue_id]
            if queue_id == job.queue or not queue.running:
                continue
            used, _ = _usage(cycle, (queue, True))
            quota = deserved(state, (queue, True))
            if any(_above(used[r], quota[r]) for r, _ in asked):
                yield queue_id

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        if victim.queue == job.queue:
            return False
        if job.displaced_by.get(victim.id) in cycle.explicit_reasons():
            return False
        state = cycle.state
        if not self._within_deserved(
            cycle, job, below_meeting_point(state, job.queue, victim.queue)
        ):
            return False
        asked = guarded(cycle.state, job)
        for entity in below_meeting_point(state, victim.queue, job.queue):
            used, _ = _usage(cycle, entity)
            quota = deserved(state, entity)
            if not any(_above(used[r], quota[r]) for r, _ in asked):
                return False
        return True

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        """No victim-side entity ends below its deserved quota in a resource the job asks for
        (runs with the victims already released by the selector's statement)."""
        state = cycle.state
        asked = guarded(cycle.state, job)
        seen: set[tuple[str, bool]] = set()
        for victim in victims:
            for entity in below_meeting_point(state, victim.queue, job.queue):
                key = (entity[0].id, entity[1])
                if key in seen:
                    continue
                seen.add(key)
                used, _ = _usage(cycle, entity)
                quota = deserved(state, entity)
                for r, _ in asked:
                    if quota[r] != UNLIMITED and used[r] < quota[r] - EPSILON:
                        return False
        return True

    def release_room(self, cycle: CycleView, job: Job, queue_id: str) -> tuple[float, float, float]:
        """How much stopping `queue_id`'s jobs may release before `allows_after` refuses: per
        guarded resource, the least, over the victim side's entities, of what the entity uses
        above its deserved quota (domain.cycle.framework.ReleaseBound)."""
        state = cycle.state
        room = [math.inf, math.inf, math.inf]
        asked = guarded(state, job)
        for entity in below_meeting_point(state, queue_id, job.queue):
            used, _ = _usage(cycle, entity)
            quota = deserved(state, entity)
            for r, _ in asked:
                if quota[r] != UNLIMITED:
                    room[r] = min(room[r], used[r] - quota[r])
        return (room[0], room[1], room[2])

    def _within_deserved(self, cycle: CycleView, job: Job, entities: list[Entity]) -> bool:
        """Every entity stays within its deserved quota once the whole job runs."""
        asked = guarded(cycle.state, job)
        for entity in entities:
            used, _ = _usage(cycle, entity)
            quota = deserved(cycle.state, entity)
            for r, amount in asked:
                if quota[r] != UNLIMITED and used[r] + amount > quota[r] + EPSILON:
                    return False
        return True


def below_deserved(cycle: CycleView, job: Job) -> bool:
    """Whether the job's queue (its own jobs) is below its deserved quota in a resource the
    job asks for: the promise reclaim keeps (for reclaim with moves and explain)."""
    state = cycle.state
    entity: Entity = (state.queues[job.queue], True)
    used, _ = _usage(cycle, entity)
    quota = deserved(state, entity)
    return any(quota[r] == UNLIMITED or used[r] < quota[r] for r, _ in guarded(state, job))
