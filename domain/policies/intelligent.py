"""Intelligent queue policy: priority >= 7 is FIFO, lower is round-robin and ages by +1 per
aging_interval_s up to 6 (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.framework import Verdict
from domain.state import Job, Queue

if TYPE_CHECKING:
    from domain.session import Session

HIGH = 7  # from here on a job is never skipped
AGED_CEILING = 6  # aging never lifts a job into the never-skipped band


class Intelligent:
    kind = "intelligent"

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        if job.priority >= HIGH:
            return job.priority
        waited_ms = max(0, now - job.submitted_ts)
        steps = waited_ms // (queue.policy.aging_interval_s * 1000)
        return int(min(AGED_CEILING, job.priority + steps))

    def on_blocked(self, job: Job, queue: Queue, session: Session) -> Verdict:
        if self.effective_priority(job, queue, session.ts) >= HIGH:
            return Verdict.STOP
        return Verdict.SKIP
