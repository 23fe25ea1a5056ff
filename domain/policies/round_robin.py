"""Round-robin queue policy: a blocked job is skipped and the next one tried (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.framework import Verdict
from domain.state import Job, Queue

if TYPE_CHECKING:
    from domain.session import Session


class RoundRobin:
    kind = "round_robin"

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def on_blocked(self, job: Job, queue: Queue, session: Session) -> Verdict:
        return Verdict.SKIP
