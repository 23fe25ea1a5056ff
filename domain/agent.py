"""A node agent's reactions to Dispatch and Preempt, and when a job finishes (pure).

One model for both agents QuotaFlow has: the offline simulator's built-in agent (every node,
virtual time) and the live agent (`streams/agent.py`, one node, wall-clock time). The model
decides what each command means and which report answers it; the live agent only adds the
I/O: starting and stopping processes or timers, and sending the reports.

- Dispatch: a new run reported with JobStarted. Another Dispatch of the same attempt on the
  same node is an elastic job expanding there (JobStarted again; it finishes with the run).
  A newer attempt replaces an older one here quietly (the older one's reports would be
  stale). A Dispatch addressed to another incarnation of the agent is ignored: the core has
  requeued that job when the agent's restart reached it.
- Preempt: stops the run (JobPreempted), or only some of its tasks (a shrink: the rest keep
  running). A Preempt for a run that already finished here is ignored; one for a run that
  is not here is answered with JobPreempted at once: nothing runs, the resources may be freed.
- A run with `duration_s` finishes (succeeded) `duration_s` after it started, rounded to the
  millisecond; one without runs until stopped (or, in the live agent, until its process ends).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Literal

from domain.commands import Dispatch, Preempt
from domain.events import JobFinished, JobPreempted, JobStarted
from domain.trusted import Trusted

Outcome = Literal["succeeded", "failed"]
ReactionKind = Literal[
    "start", "expand", "other_incarnation", "stop", "shrink", "already_finished", "not_running"
]


@dataclass(slots=True)
class Run:
    """One attempt of a job running on one node."""

    job: str
    node: str
    attempt: int
    tasks: int
    duration_s: float | None
    labels: dict[str, str]
    started_ts: int
    order: int  # start order: ties between runs due at the same moment

    @property
    def due_ts(self) -> int | None:
        """When the run finishes on its own, or None when it runs until stopped."""
        if self.duration_s is None:
            return None
        return self.started_ts + round(self.duration_s * 1000)

    @property
    def command(self) -> str | None:
        return self.labels.get("command")


@dataclass(frozen=True, slots=True)
class Reaction:
    """What a command means here: its kind, the report that answers it (sent after any
    process is stopped), the run concerned, and an older run it displaced (to stop quietly)."""

    kind: ReactionKind
    report: JobStarted | JobPreempted | None = None
    run: Run | None = None
    displaced: Run | None = None


@dataclass
class AgentModel:
    """The runs of one or more nodes' agents, keyed by (node, job)."""

    incarnation: int | None = None  # this agent's start count, when it sends one
    runs: dict[tuple[str, str], Run] = field(default_factory=dict)
    finished: set[tuple[str, str, int]] = field(default_factory=set)  # (node, job, attempt)
    _due: list[tuple[int, int, str, str]] = field(default_factory=list)  # (due, order, node, job)
    _started: int = 0

    def dispatch(self, command: Dispatch, now_ts: int) -> Reaction:
        if (
            command.incarnation is not None
            and self.incarnation is not None
            and command.incarnation != self.incarnation
        ):
            return Reaction("other_incarnation")
        key = (command.node, command.job)
        started = _STARTED(job=command.job, node=command.node, attempt=command.attempt)
        current = self.runs.get(key)
        if current is not None and current.attempt == command.attempt:
            current.tasks += command.tasks
            return Reaction("expand", started, current)
        self._started += 1
        run = Run(
            job=command.job,
            node=command.node,
            attempt=command.attempt,
            tasks=command.tasks,
            duration_s=command.duration_s,
            labels=dict(command.labels or {}),
            started_ts=now_ts,
            order=self._started,
        )
        self.runs[key] = run
        due = run.due_ts
        if due is not None:
            heapq.heappush(self._due, (due, run.order, run.node, run.job))
        return Reaction("start", started, run, displaced=current)

    def preempt(self, command: Preempt) -> Reaction:
        key = (command.node, command.job)
        run = self.runs.get(key)
        preempted = _PREEMPTED(job=command.job, node=command.node, attempt=command.attempt)
        if run is None or run.attempt != command.attempt:
            if (command.node, command.job, command.attempt) in self.finished:
                return Reaction("already_finished")
            return Reaction("not_running", preempted)
        run.tasks -= command.tasks
        if run.tasks > 0:
            return Reaction("shrink", preempted, run)
        del self.runs[key]
        return Reaction("stop", preempted, run)

    def finish(self, run: Run, outcome: Outcome) -> JobFinished | None:
        """The run ended on its own; None when it was stopped or replaced meanwhile."""
        key = (run.node, run.job)
        if self.runs.get(key) is not run:
            return None
        del self.runs[key]
        self.finished.add((run.node, run.job, run.attempt))
        return _FINISHED(job=run.job, node=run.node, attempt=run.attempt, outcome=outcome)

    def next_due(self) -> int | None:
        """The moment the next run finishes on its own, if any."""
        self._drop_stale()
        return self._due[0][0] if self._due else None

    def finish_due(self, now_ts: int) -> list[JobFinished]:
        """Every run due by `now_ts` finishes (succeeded), earliest first, then in start order."""
        reports: list[JobFinished] = []
        while True:
            self._drop_stale()
            if not self._due or self._due[0][0] > now_ts:
                return reports
            _, _, node, job = heapq.heappop(self._due)
            report = self.finish(self.runs[(node, job)], "succeeded")
            assert report is not None
            reports.append(report)

    def _drop_stale(self) -> None:
        """Drops due entries of runs that were stopped or replaced since they were pushed."""
        while self._due:
            _, order, node, job = self._due[0]
            run = self.runs.get((node, job))
            if run is not None and run.order == order:
                return
            heapq.heappop(self._due)


# The agent's reports, built from the Dispatch or Preempt it answers (domain/trusted.py).
_STARTED, _PREEMPTED = Trusted(JobStarted), Trusted(JobPreempted)
_FINISHED = Trusted(JobFinished)
