"""Round-robin queue policy: a blocked job is skipped and the next one tried (pure)."""

from __future__ import annotations

from domain.cycle.framework import CycleView, Verdict
from domain.state import Job, Queue


class RoundRobin:
    kind = "round_robin"
    walk_settles = True  # skips every blocked job; its order reads no time
    ages = False  # effective_priority is the job's own priority

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def on_blocked(self, job: Job, queue: Queue, cycle: CycleView) -> Verdict:
        return Verdict.SKIP

    def skips_in(self, job: Job, queue: Queue, now: int) -> float | None:
        return None

    def blocking(self, job: Job, queue: Queue, skip_in_s: float | None) -> str:
        return f"blocked at the head of a {self.kind} queue"

    def skipping(self, job: Job, queue: Queue) -> str:
        return f"blocked, so {self.kind} skips it"
