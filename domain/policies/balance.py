"""Balance queue policy: FIFO until the blocked job has waited balance_timeout_s, then skipped,
so the round-robin window widens by one job per timeout (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.framework import Verdict
from domain.state import Job, Queue

if TYPE_CHECKING:
    from domain.session import Session

TIMER = "balance"  # the kind of the timer that wakes a cycle when a blocked job's time is up


class Balance:
    kind = "balance"

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def skips_at(self, job: Job, queue: Queue) -> int | None:
        """When the job, blocked since `blocked_since`, stops holding up the queue."""
        if job.blocked_since is None:
            return None
        return job.blocked_since + queue.policy.balance_timeout_s * 1000

    def on_blocked(self, job: Job, queue: Queue, session: Session) -> Verdict:
        due = self.skips_at(job, queue)
        if due is None or session.ts >= due:
            return Verdict.SKIP
        # The timeout must end the stop even if nothing else happens by then; time only
        # advances through journal records, so the wake-up is a timer in the state.
        session.state.add_timer(due, TIMER, job.id)
        return Verdict.STOP
