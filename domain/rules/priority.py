"""Priority preemption within one queue: strictly lower-priority jobs make room (pure).

Enabled per queue by `preemption.within_queue`; victims are the same queue's preemptible
jobs of strictly lower priority, so two jobs can never preempt each other under it.
"""

from __future__ import annotations

from collections.abc import Iterator

from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.state import Job


class WithinQueuePriority:
    reason: PreemptReason = "priority"
    explains = (
        "priority (within_queue): a higher-priority job of the same queue preempted a strictly "
        "lower-priority preemptible job"
    )
    explicit = False  # a PAI rule: dominates fairness
    fairness = False

    def applies(self, cycle: CycleView, job: Job) -> bool:
        return cycle.state.queues[job.queue].preemption.within_queue

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterator[str]:
        yield job.queue

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        return (
            victim.queue == job.queue
            and victim.priority < job.priority
            and self.applies(cycle, job)
        )

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        # As preemptor or as victim, only within a queue whose within-queue preemption is on.
        return self.applies(cycle, job)

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        return True
