"""PAI child-level preemption: a parent queue's own jobs take from matching jobs below it (pure).

Configured on the parent P as `preemption.child_level`: a job submitted to P itself that cannot
get enough resources may preempt jobs of any queue below P whose priority lies in `priority`
and whose module is listed in `modules`. The range filters victims only, as in PAI.
"""

from __future__ import annotations

from collections.abc import Iterator

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.rules.self_level import in_range, subtree
from domain.state import Job
from domain.wire_types import ChildLevelRule


class ChildLevel:
    reason: PreemptReason = "child_level"
    explains = (
        "child_level (PAI): the parent queue's child-level rule lets its own jobs preempt "
        "matching jobs in the queues below it"
    )
    explicit = True  # a PAI rule: dominates fairness
    fairness = False

    def _rule(self, cycle: CycleView, job: Job) -> ChildLevelRule | None:
        queue = cycle.state.queues[job.queue]
        if not queue.children:
            return None
        return queue.preemption.child_level

    def applies(self, cycle: CycleView, job: Job) -> bool:
        return self._rule(cycle, job) is not None

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        for child in sorted(cycle.state.queues[job.queue].children):
            yield from subtree(cycle.state, child)

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        rule = self._rule(cycle, job)
        if rule is None or victim.queue == job.queue:
            return False
        if not in_range(victim.priority, rule.priority) or victim.module not in rule.modules:
            return False
        # Below P: P is a strict ancestor of the victim's queue.
        return any(q.id == job.queue for q in cycle.state.ancestors(victim.queue))

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        # The range filters victims: the job's priority counts below a queue with the rule.
        return any(q.preemption.child_level is not None for q in cycle.state.ancestors(job.queue))

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        return True
