"""Reclaim by deserved quota: the fallback of reclaim when no fair-share victim set exists (pure).

Whole jobs, fragmented nodes or quotas that add up to more than the cluster can leave no set
of victims that keeps every victim queue at its fair share. Then a queue may also take from a
queue that is above its *deserved quota* now, as long as the reclaimer ends within its own
deserved quota; the victim queue may end below its fair share and even below its deserved
quota (whole jobs: a queue 1 GPU above its deserved quota may lose a 4-GPU job). The
comparison is made below the two queues' meeting point, as for reclaim (domain.rules.reclaim).

Nothing oscillates: the reclaimer ends within its deserved quota, so it is never a victim of
this rule. Nor of the fair-share rule: a reclaimer that ends within its fair share is not above
it; one that ends beyond it was short of its deserved quota and demand, so (fair shares
containing min(deserved quota, demand) unless capacity runs short, and then adding up to it)
no queue's fair share exceeds its deserved quota, and the victim queue, above its deserved
quota, is above its fair share too and may not reclaim. Whole-device fair shares can break
that premise for a fractional demand (a parent's own quarter GPU may get a share of 0), so
the selector also refuses any victim that could take the room right back, before the
victims stop (`could_preempt_back`) and after (`takes_back`). See docs/quotas.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.quota import UNLIMITED
from domain.resources import Resources
from domain.rules.reclaim import (
    EPSILON,
    Asked,
    Entity,
    _usage,
    admits_victim,
    below_meeting_point,
    cached_candidates,
    requested,
)
from domain.state import Job, State


def deserved(state: State, entity: Entity) -> tuple[int, int, int]:
    """The entity's deserved quota (UNLIMITED allowed): its queue's, or for a parent's own
    jobs what the parent's quota leaves after its children's."""
    queue, own = entity
    if own and queue.children:
        return queue.quota.own_quota([state.queues[c].quota for c in queue.children])
    return queue.quota.quota


def guarded(cycle: CycleView, job: Job) -> Asked:
    """(resource index, amount) the job asks for in which its queue deserves something: the
    fallback restores a guarantee, and a queue with no deserved quota of a resource (e.g.
    cpu it does not mention) has none to restore there. Kept per queue and request for the
    cycle (quotas change only between cycles)."""
    memo: dict[tuple[str, Resources, int], Asked] = cycle.memo("reclaim_guarded", dict)
    key = (job.queue, job.per_task, job.tasks)
    found = memo.get(key)
    if found is None:
        state = cycle.state
        quota = deserved(state, (state.queues[job.queue], True))
        asked = requested(cycle, job)
        found = memo[key] = tuple((r, amount) for r, amount in asked if quota[r] != 0)
    return found


def _above(used: int, quota: int) -> bool:
    return quota != UNLIMITED and used > quota + EPSILON


class ReclaimDeserved:
    reason: PreemptReason = "reclaim"
    explains = (
        "or, where whole jobs or oversubscribed quotas leave no such victims, from a queue "
        "above its deserved quota, the reclaimer ending within its own"
    )
    explicit = False
    fairness = True

    def applies(self, cycle: CycleView, job: Job) -> bool:
        queue = cycle.state.queues[job.queue]
        return bool(guarded(cycle, job)) and self._within_deserved(cycle, job, [(queue, True)])

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        asked = guarded(cycle, job)
        key = ("reclaim_deserved", tuple(r for r, _ in asked))
        return cached_candidates(cycle, key, lambda: self._candidates(cycle, asked), job.queue)

    def _candidates(self, cycle: CycleView, asked: Asked) -> Iterator[str]:
        state = cycle.state
        for queue_id in sorted(state.queues):
            queue = state.queues[queue_id]
            if not queue.running:
                continue
            used, _ = _usage(cycle, (queue, True))
            quota = deserved(state, (queue, True))
            if any(_above(used[r], quota[r]) for r, _ in asked):
                yield queue_id

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        return admits_victim(cycle, "reclaim_deserved", job, victim, self._admits_queue)

    def _admits_queue(self, cycle: CycleView, job: Job, victim_queue: str) -> bool:
        state = cycle.state
        if not self._within_deserved(
            cycle, job, below_meeting_point(state, job.queue, victim_queue)
        ):
            return False
        asked = guarded(cycle, job)
        for entity in below_meeting_point(state, victim_queue, job.queue):
            used, _ = _usage(cycle, entity)
            quota = deserved(state, entity)
            if not any(_above(used[r], quota[r]) for r, _ in asked):
                return False
        return True

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        """Any set of admitted victims: each victim queue was above its deserved quota, and may
        end below it (contract section 6: the reclaimer ends within its own; see the module
        docstring for why nothing oscillates)."""
        return True

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        return False  # no verdict reads a job's priority

    def _within_deserved(self, cycle: CycleView, job: Job, entities: list[Entity]) -> bool:
        """Every entity stays within its deserved quota once the whole job runs."""
        asked = guarded(cycle, job)
        for entity in entities:
            used, _ = _usage(cycle, entity)
            quota = deserved(cycle.state, entity)
            for r, amount in asked:
                if quota[r] != UNLIMITED and used[r] + amount > quota[r] + EPSILON:
                    return False
        return True


def below_deserved(cycle: CycleView, job: Job) -> bool:
    """Whether the job's queue (its own jobs) is below its deserved quota in a resource the
    job asks for: the promise reclaim keeps (for reclaim with moves and explain). Kept per
    queue and request while nothing lasting changes: a blocked job's try asks it from
    reclaim with moves and again from its reclaim reason."""
    key = (job.queue, job.per_task, job.tasks)
    memo: dict[tuple[str, Resources, int], tuple[int, bool]] = cycle.memo("below_deserved", dict)
    changes = cycle.lasting_changes()
    cached = memo.get(key)
    if cached is not None and changes is not None and cached[0] == changes:
        return cached[1]
    found = _below_deserved(cycle, job)
    if changes is not None:
        memo[key] = (changes, found)
    return found


def _below_deserved(cycle: CycleView, job: Job) -> bool:
    state = cycle.state
    entity: Entity = (state.queues[job.queue], True)
    used, _ = _usage(cycle, entity)
    quota = deserved(state, entity)
    return any(quota[r] == UNLIMITED or used[r] < quota[r] for r, _ in guarded(cycle, job))
