"""PAI child-level preemption: a parent queue's own jobs take from matching jobs below it (pure).

Configured on the parent P as `preemption.child_level`: a job submitted to P itself that cannot
get enough resources may preempt jobs of any queue below P whose priority lies in `priority`
and whose module is listed in `modules`. The range filters victims only, as in PAI.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from domain.events import ChildLevelRule
from domain.rules.self_level import in_range, subtree
from domain.state import Job

if TYPE_CHECKING:
    from domain.session import Session


class ChildLevel:
    reason = "child_level"

    def _rule(self, session: Session, job: Job) -> ChildLevelRule | None:
        queue = session.state.queues[job.queue]
        if not queue.children:
            return None
        return queue.preemption.child_level

    def applies(self, session: Session, job: Job) -> bool:
        return self._rule(session, job) is not None

    def candidate_queues(self, session: Session, job: Job) -> Iterator[str]:
        for child in sorted(session.state.queues[job.queue].children):
            yield from subtree(session.state, child)

    def admits(self, session: Session, job: Job, victim: Job) -> bool:
        rule = self._rule(session, job)
        if rule is None or victim.queue == job.queue:
            return False
        if not in_range(victim.priority, rule.priority) or victim.module not in rule.modules:
            return False
        # Below P: P is a strict ancestor of the victim's queue.
        return any(q.id == job.queue for q in session.state.ancestors(victim.queue))

    def allows_after(self, session: Session, job: Job, victims: list[Job]) -> bool:
        return True
