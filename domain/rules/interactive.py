"""Interactive preemption (Run:AI): an interactive job within its queue's deserved quota takes
from that queue's unattended preemptible jobs (pure).

Admission already keeps interactive jobs within deserved quota, and the victim selector's
simulation re-checks that quota once the victims are gone, so this rule only names who may
make room: the same queue's running unattended jobs. Interactive and non-preemptible jobs are
never victims (the session's universal filter), and an interactive job is never preemptible,
so no victim can preempt it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from domain.state import Job

if TYPE_CHECKING:
    from domain.session import Session


class Interactive:
    reason = "interactive"

    def applies(self, session: Session, job: Job) -> bool:
        return job.interactive

    def candidate_queues(self, session: Session, job: Job) -> Iterator[str]:
        yield job.queue

    def admits(self, session: Session, job: Job, victim: Job) -> bool:
        return job.interactive and victim.queue == job.queue and not victim.interactive

    def allows_after(self, session: Session, job: Job, victims: list[Job]) -> bool:
        return True
