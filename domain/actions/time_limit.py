"""Time limits: the scheduler stops a job that has run its time_limit_s; it ends failed (pure)."""

from __future__ import annotations

from domain.cycle.framework import Cycle
from domain.entities import TIME_LIMIT_TIMER as TIMER
from domain.entities import JobStatus


def stop_overdue(cycle: Cycle) -> None:
    """Preempts (reason time_limit) every running job whose time limit is up at this cycle.

    The limit counts from the attempt's first JobStarted, by the journal's clock, so replay
    stops the same jobs at the same positions. A stale timer (an earlier attempt's) is skipped.
    """
    state = cycle.state
    due = sorted({ident for at, kind, ident in state.timers if kind == TIMER and at <= cycle.ts})
    for job_id in due:
        job = state.jobs.get(job_id)
        if job is None or job.status is not JobStatus.RUNNING or not job.placements:
            continue
        limit = job.spec.time_limit_s
        if limit is None or job.started_ts is None or job.started_ts + limit * 1000 > cycle.ts:
            continue
        cycle.statement.set(job, "timed_out", True)
        cycle.stop(job, "time_limit")  # status stopping; timed_out makes it end failed
