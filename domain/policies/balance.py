"""Balance queue policy: FIFO until the blocked job has waited balance_timeout_s, then skipped,
so the round-robin window widens by one job per timeout (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.framework import Verdict
from domain.state import Job, Queue

if TYPE_CHECKING:
    from domain.session import Session


class Balance:
    kind = "balance"

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def on_blocked(self, job: Job, queue: Queue, session: Session) -> Verdict:
        timeout_ms = queue.policy.balance_timeout_s * 1000
        since = job.blocked_since if job.blocked_since is not None else session.ts
        if session.ts - since >= timeout_ms:
            return Verdict.SKIP
        # Wake a cycle when the timeout runs out, even if nothing else happens by then.
        session.state.add_timer(since + timeout_ms, "balance", job.id)
        return Verdict.STOP
