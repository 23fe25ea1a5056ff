"""FIFO queue policy: a blocked job stops its queue for the cycle (pure)."""

from __future__ import annotations

from domain.cycle.framework import CycleView, Verdict
from domain.state import Job, Queue


class Fifo:
    kind = "fifo"
    walk_settles = False
    ages = False  # effective_priority is the job's own priority

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def on_blocked(self, job: Job, queue: Queue, cycle: CycleView) -> Verdict:
        return Verdict.STOP

    def skips_in(self, job: Job, queue: Queue, now: int) -> float | None:
        return None

    def blocking(self, job: Job, queue: Queue, skip_in_s: float | None) -> str:
        return f"blocked at the head of a {self.kind} queue"

    def skipping(self, job: Job, queue: Queue) -> str:
        return f"blocked, so {self.kind} skips it"
