"""Priority preemption within one queue: strictly lower-priority jobs make room (pure).

Enabled per queue by `preemption.within_queue`; victims are the same queue's preemptible
jobs of strictly lower priority, so two jobs can never preempt each other under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from domain.state import Job

if TYPE_CHECKING:
    from domain.session import Session


class WithinQueuePriority:
    reason = "priority"

    def applies(self, session: Session, job: Job) -> bool:
        return session.state.queues[job.queue].preemption.within_queue

    def candidate_queues(self, session: Session, job: Job) -> Iterator[str]:
        yield job.queue

    def admits(self, session: Session, job: Job, victim: Job) -> bool:
        return (
            victim.queue == job.queue
            and victim.priority < job.priority
            and self.applies(session, job)
        )

    def allows_after(self, session: Session, job: Job, victims: list[Job]) -> bool:
        return True
