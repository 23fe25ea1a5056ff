"""Balance queue policy: FIFO until the blocked job has waited balance_timeout_s, then skipped,
so the round-robin window widens by one job per timeout (pure)."""

from __future__ import annotations

from domain.cycle.framework import CycleView, Verdict
from domain.state import Job, Queue

TIMER = "balance"  # the kind of the timer that wakes a cycle when a blocked job's time is up


class Balance:
    kind = "balance"
    walk_settles = False
    ages = False  # effective_priority is the job's own priority

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def skips_at(self, job: Job, queue: Queue) -> int | None:
        """When the job, blocked since `blocked_since`, stops holding up the queue."""
        if job.blocked_since is None:
            return None
        return job.blocked_since + queue.policy.balance_timeout_s * 1000

    def on_blocked(self, job: Job, queue: Queue, cycle: CycleView) -> Verdict:
        due = self.skips_at(job, queue)
        if due is None or cycle.ts >= due:
            return Verdict.SKIP
        # The timeout must end the stop even if nothing else happens by then; time only
        # advances through journal records, so the wake-up is a timer in the state.
        cycle.wake_at(due, TIMER, job.id)
        return Verdict.STOP

    def skips_in(self, job: Job, queue: Queue, now: int) -> float | None:
        due = self.skips_at(job, queue)
        return None if due is None else max(0, due - now) / 1000

    def blocking(self, job: Job, queue: Queue, skip_in_s: float | None) -> str:
        if skip_in_s is None:
            return f"blocked at the head of a {self.kind} queue"
        return (
            f"blocked at the head of a balance queue, {skip_in_s:g} s left before balance skips it"
        )

    def skipping(self, job: Job, queue: Queue) -> str:
        return f"blocked for over {queue.policy.balance_timeout_s} s, so balance skips it"
