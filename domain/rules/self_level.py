"""PAI self-level preemption: a high-priority job takes from matching jobs of sibling queues (pure).

Configured on the preemptor's queue Q as `preemption.self_level`: a job of Q whose priority lies
in `high_priority` may preempt jobs of Q's siblings (same parent; top-level queues are siblings
of each other), and of the queues below those siblings, whose priority lies in `low_priority`
and whose module is listed in `modules`.
"""

from __future__ import annotations

from collections.abc import Iterator

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.state import Job, State
from domain.wire_types import SelfLevelRule

_ANYWHERE = "self_level_anywhere"  # State.configuration_memo: some queue has the rule


def in_range(priority: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= priority <= bounds[1]


def siblings(state: State, queue_id: str) -> list[str]:
    """The queues at the same level as `queue_id`, sorted."""
    parent = state.queues[queue_id].parent
    peers = state.top_level_queues() if parent is None else state.queues[parent].children
    return sorted(peer for peer in peers if peer != queue_id)


def subtree(state: State, queue_id: str) -> Iterator[str]:
    """`queue_id` and every queue below it, depth first in sorted order."""
    stack = [queue_id]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(sorted(state.queues[current].children, reverse=True))


def top_sibling(state: State, preemptor_queue: str, victim_queue: str) -> bool:
    """True when the victim's queue is a sibling of the preemptor's or lies below one.

    A sibling quota's resources are used by the jobs of its whole subtree, so those are what
    self-level preemption takes from (decision recorded in docs/preemption.md)."""
    parent = state.queues[preemptor_queue].parent
    for ancestor in state.ancestors(victim_queue):
        if ancestor.parent == parent:
            return ancestor.id != preemptor_queue
    return False


class SelfLevel:
    reason: PreemptReason = "self_level"
    explains = (
        "self_level (PAI): the queue's self-level rule lets its high-priority jobs of the listed "
        "modules preempt sibling queues' low-priority jobs"
    )
    explicit = True  # a PAI rule: dominates fairness
    fairness = False

    def _rule(self, cycle: CycleView, job: Job) -> SelfLevelRule | None:
        rule = cycle.state.queues[job.queue].preemption.self_level
        if rule is None or not in_range(job.priority, rule.high_priority):
            return None
        return rule

    def applies(self, cycle: CycleView, job: Job) -> bool:
        return self._rule(cycle, job) is not None

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        state = cycle.state
        for peer in siblings(state, job.queue):
            yield from subtree(state, peer)

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        rule = self._rule(cycle, job)
        if rule is None:
            return False
        if not in_range(victim.priority, rule.low_priority) or victim.module not in rule.modules:
            return False
        return top_sibling(cycle.state, job.queue, victim.queue)

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        # Both ranges read priorities: the job's own queue's rule, and its siblings' (or
        # their ancestors' siblings') as victim. Any queue with the rule counts, checked once
        # until the configuration changes (asked once per queue, so not once per cycle).
        memo = cycle.state.configuration_memo
        anywhere = memo.get(_ANYWHERE)
        if anywhere is None:
            anywhere = memo[_ANYWHERE] = any(
                queue.preemption.self_level is not None for queue in cycle.state.queues.values()
            )
        return bool(anywhere)

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        return True
