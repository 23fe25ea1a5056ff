"""Intelligent queue policy: priority >= 7 is FIFO, lower is round-robin and ages by +1 per
aging_interval_s up to 6 (pure)."""

from __future__ import annotations

from domain.cycle.framework import CycleView, Verdict
from domain.state import Job, Queue

HIGH = 7  # from here on a job is never skipped
AGED_CEILING = 6  # aging never lifts a job into the never-skipped band


def aged_priority(priority: int, waited_ms: int, aging_interval_s: int) -> int:
    """The seed's aging: +1 per full aging interval waited, up to 6; 7 and above stay as is."""
    if priority >= HIGH:
        return priority
    steps = max(0, waited_ms) // (aging_interval_s * 1000)
    return min(AGED_CEILING, priority + steps)


class Intelligent:
    kind = "intelligent"
    walk_settles = False
    ages = True  # effective_priority adds aging by time

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        # Wait counts from submission, not from the last requeue: a requeued job keeps its
        # place, and its aging with it (this also keeps the pending lists' merge exact).
        return aged_priority(job.priority, now - job.submitted_ts, queue.policy.aging_interval_s)

    def on_blocked(self, job: Job, queue: Queue, cycle: CycleView) -> Verdict:
        # Aging stops at 6, so only a job submitted at 7 or above ever stops the queue.
        if self.effective_priority(job, queue, cycle.ts) >= HIGH:
            return Verdict.STOP
        return Verdict.SKIP

    def skips_in(self, job: Job, queue: Queue, now: int) -> float | None:
        return None

    def blocking(self, job: Job, queue: Queue, skip_in_s: float | None) -> str:
        return f"blocked with priority {job.priority} >= {HIGH}, so intelligent does not skip it"

    def skipping(self, job: Job, queue: Queue) -> str:
        return f"blocked with priority below {HIGH}, so intelligent skips it"
