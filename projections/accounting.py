"""Accounting: every job ever submitted, who submitted it, when it ran, and the resource-hours it held (pure).

Like Slurm's sacct/sreport, a job's usage is what it was *allocated* (its placed tasks times
its per-task request, including tasks being stopped, whose resources stay taken until their
agent reports), integrated over time between group boundaries. The ledger is folded
alongside the view: each record names the jobs it touches, each cycle's commands too, and
at each group boundary only those jobs are looked at, unless the amounts held no longer add
up to the queues' allocation (then every job holding resources is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.commands import NodeCommand
from domain.events import JobSubmitted, JournalRecord
from domain.resources import milli_to_gpu
from domain.state import State

MS_PER_HOUR = 3_600_000
Amounts = tuple[int, int, int]  # gpu (thousandths), cpu (millicores), memory (MB)
STATES = ("pending", "running", "finished", "failed", "cancelled")


@dataclass(slots=True)
class JobAccount:
    """One job's record: who, where, when, how it ended and what it held over time."""

    job: str
    queue: str
    user: str | None
    submitted_ts: int
    request: Amounts  # the whole job at full size
    tasks: int
    started_ts: int | None = None
    ended_ts: int | None = None
    status: str = "pending"
    # Allocation change points: (ts, amounts held from ts on); the last one holds until now.
    held: list[tuple[int, Amounts]] = field(default_factory=list)

    def used_ms(self, since: int | None, until: int) -> tuple[float, float, float]:
        """Amount x milliseconds held within [since, until)."""
        totals = [0.0, 0.0, 0.0]
        for index, (start, amounts) in enumerate(self.held):
            end = self.held[index + 1][0] if index + 1 < len(self.held) else until
            lo = start if since is None else max(start, since)
            hi = min(end, until)
            if hi > lo:
                for r in range(3):
                    totals[r] += amounts[r] * (hi - lo)
        return (totals[0], totals[1], totals[2])

    def to_json(self) -> dict[str, Any]:
        gpu, cpu, memory = self.request
        return {
            "job": self.job,
            "queue": self.queue,
            "user": self.user,
            "status": self.status,
            "tasks": self.tasks,
            "request": {"gpu": milli_to_gpu(gpu), "cpu": cpu, "memory": memory},
            "submitted_ts": self.submitted_ts,
            "started_ts": self.started_ts,
            "ended_ts": self.ended_ts,
        }


@dataclass(slots=True)
class Ledger:
    """Every job's account, in submission order, and which jobs the open group touched."""

    jobs: dict[str, JobAccount] = field(default_factory=dict)
    holding: set[str] = field(default_factory=set)  # jobs whose last amounts are not zero
    touched: set[str] = field(default_factory=set)
    total: Amounts = (0, 0, 0)  # the sum of every account's last amounts

    def note(self, record: JournalRecord) -> None:
        """A journal record: a submission opens an account; any job event marks its job."""
        event = record.event
        if isinstance(event, JobSubmitted):
            request = event.resources.to_resources() * event.tasks
            self.jobs[event.job] = JobAccount(
                job=event.job,
                queue=event.queue,
                user=event.user,
                submitted_ts=record.ts,
                request=request.as_tuple(),
                tasks=event.tasks,
            )
        job = getattr(event, "job", None)
        if isinstance(job, str) and job in self.jobs:
            self.touched.add(job)

    def observe(self, state: State, commands: list[NodeCommand]) -> None:
        """After a group's cycle (at state.ts): the status and amounts of the jobs the group
        touched. If the amounts held then disagree with the queues' total allocation (a lost
        node or an agent's reconcile freed tasks no record names), every holding job is looked at."""
        for command in commands:
            if command.job in self.jobs:
                self.touched.add(command.job)
        for job_id in sorted(self.touched):
            self._update(state, job_id)
        self.touched.clear()
        if self.total != _allocated(state):
            for job_id in sorted(self.holding):
                self._update(state, job_id)

    def _update(self, state: State, job_id: str) -> None:
        account = self.jobs[job_id]
        ts = state.ts
        job = state.jobs.get(job_id)
        amounts: Amounts = (0, 0, 0)
        if job is not None:
            amounts = job.allocation.as_tuple()
            account.status = job.status.value
            if job.started_ts is not None and account.started_ts is None:
                account.started_ts = job.started_ts
        else:
            ended = state.ended_jobs.get(job_id)
            if ended is not None and account.ended_ts is None:
                account.status = ended.value
                account.ended_ts = ts
        last = account.held[-1][1] if account.held else (0, 0, 0)
        if amounts == last:
            return
        self.total = (
            self.total[0] - last[0] + amounts[0],
            self.total[1] - last[1] + amounts[1],
            self.total[2] - last[2] + amounts[2],
        )
        if account.held and account.held[-1][0] == ts:
            account.held[-1] = (ts, amounts)
        else:
            account.held.append((ts, amounts))
        if amounts != (0, 0, 0):
            self.holding.add(job_id)
        else:
            self.holding.discard(job_id)


def _allocated(state: State) -> Amounts:
    """Everything allocated: the root queues' subtree allocations (every job is in one)."""
    gpu = cpu = memory = 0
    for queue in state.queues.values():
        if queue.parent is None:
            held = queue.subtree_allocated
            gpu, cpu, memory = gpu + held.gpu, cpu + held.cpu, memory + held.memory
    return (gpu, cpu, memory)


def state_of(status: str) -> str:
    """The user's five job states: stopping counts as running, cancelling as running or pending."""
    if status in ("stopping", "cancelling"):
        return "running"
    return status


def job_rows(
    ledger: Ledger,
    *,
    now: int,
    users: frozenset[str] = frozenset(),
    states: frozenset[str] = frozenset(),
    queues: frozenset[str] = frozenset(),
    ended_since: int | None = None,
    include_ended: bool = False,
) -> list[dict[str, Any]]:
    """Jobs in submission order, filtered; ended jobs only with include_ended or ended_since."""
    rows = []
    for account in ledger.jobs.values():
        if users and account.user not in users:
            continue
        if queues and account.queue not in queues:
            continue
        state = state_of(account.status)
        if states and state not in states:
            continue
        if account.ended_ts is not None:
            if not include_ended and ended_since is None:
                continue
            if ended_since is not None and account.ended_ts < ended_since:
                continue
        row = account.to_json()
        row["state"] = state
        gpu_ms, _, _ = account.used_ms(None, now)
        row["gpu_hours"] = round(gpu_ms / 1000 / MS_PER_HOUR, 6)
        rows.append(row)
    return rows


def usage_report(ledger: Ledger, *, by: str, since: int | None, until: int) -> list[dict[str, Any]]:
    """Resource-hours per queue or per user within [since, until), like sreport; sorted by name."""
    totals: dict[str, list[float]] = {}
    jobs: dict[str, int] = {}
    for account in ledger.jobs.values():
        used = account.used_ms(since, until)
        if not any(used):
            continue
        name = account.queue if by == "queue" else (account.user or "-")
        bucket = totals.setdefault(name, [0.0, 0.0, 0.0])
        for r in range(3):
            bucket[r] += used[r]
        jobs[name] = jobs.get(name, 0) + 1
    return [
        {
            by: name,
            "jobs": jobs[name],
            "gpu_hours": round(used[0] / 1000 / MS_PER_HOUR, 6),
            "cpu_hours": round(used[1] / 1000 / MS_PER_HOUR, 6),
            "memory_gb_hours": round(used[2] / 1024 / MS_PER_HOUR, 6),
        }
        for name, used in sorted(totals.items())
    ]
