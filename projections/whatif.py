"""What-if: re-simulate a journal's workload with changed queue configuration and compare (pure).

A replay cannot know how agents would have reacted to different commands, so both sides are
re-simulated with domain.simulation's built-in agent, from the journal's inputs: queue,
cluster and node configuration and job submissions at their journal `ts`, with each job's
`duration_s` (or, when it has none, the run time the journal shows: its last start to its
finish; a job still running at the end of the journal runs until then). The baseline is
the same re-simulation without overrides, so the comparison is like for like. A policy file's
`nodes_down` adds simulator NodeDown directives to the what-if side's input (contract section
7): the node fails then, exactly as in `quotaflow simulate`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from domain.codec import event_to_wire
from domain.commands import Dispatch, Preempt
from domain.events import (
    ClusterConfigured,
    Event,
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JournalRecord,
    NodeHeartbeat,
    QueueConfigured,
    QueueDeleted,
)
from domain.pending import pending_view
from domain.resources import gpu_to_milli
from domain.simulation import NodeDown, Simulator
from projections.whatif_overrides import (
    WILDCARD,
    Item,
    Overrides,
    WhatIfError,
    override_cluster,
    override_queue,
    parse_overrides,
    with_nodes_down,
)

__all__ = ["Comparison", "Overrides", "WhatIfError", "compare", "parse_overrides", "workload"]

# -- the workload -----------------------------------------------------------------------------


def workload(records: Iterable[JournalRecord]) -> list[tuple[int, Event]]:
    """The journal's inputs for a re-simulation, in journal order, each job with a duration."""
    items: list[tuple[int, Event]] = []
    started: dict[str, int] = {}
    ran_ms: dict[str, int] = {}
    heartbeats: dict[str, NodeHeartbeat] = {}
    last_ts = 0
    for record in records:
        event, ts = record.event, record.ts
        last_ts = max(last_ts, ts)
        if isinstance(event, NodeHeartbeat):
            # Only the first heartbeat and changes matter: the built-in agent keeps nodes alive.
            previous = heartbeats.get(event.node)
            if (
                previous is None
                or previous.capacity != event.capacity
                or previous.labels != event.labels
            ):
                heartbeats[event.node] = event
                items.append((ts, event))
        elif isinstance(
            event, QueueConfigured | QueueDeleted | ClusterConfigured | JobSubmitted | JobCancelled
        ):
            items.append((ts, event))
        elif isinstance(event, JobStarted):
            started.setdefault(f"{event.job}#{event.attempt}", ts)
        elif isinstance(event, JobFinished):
            start = started.get(f"{event.job}#{event.attempt}")
            if start is not None:
                ran_ms[event.job] = ts - start
    for key, start in started.items():
        job = key.rsplit("#", 1)[0]
        ran_ms.setdefault(job, last_ts - start)  # still running: it ran at least until the end
    out: list[tuple[int, Event]] = []
    for ts, event in items:
        if isinstance(event, JobSubmitted) and event.duration_s is None and event.job in ran_ms:
            event = event.model_copy(update={"duration_s": ran_ms[event.job] / 1000})
        out.append((ts, event))
    return out


def with_overrides(items: Iterable[tuple[int, Event]], overrides: Overrides) -> list[Item]:
    out: list[Item] = []
    seen_queues: set[str] = set()
    nodes: set[str] = set()
    for ts, event in items:
        if isinstance(event, NodeHeartbeat):
            nodes.add(event.node)
        if isinstance(event, QueueConfigured):
            seen_queues.add(event.queue)
            event = override_queue(event, overrides)
        elif isinstance(event, ClusterConfigured):
            event = override_cluster(event, overrides)
        out.append((ts, event))
    missing = sorted(set(overrides.queues) - seen_queues - {WILDCARD})
    if missing:
        raise WhatIfError(f"policy file names queue(s) not in the journal: {', '.join(missing)}")
    if overrides.cluster and not any(isinstance(e, ClusterConfigured) for _, e in out):
        # The journal never configured the cluster: the override applies from the start.
        first = out[0][0] if out else 0
        out.insert(0, (first, override_cluster(ClusterConfigured(), overrides)))
    return with_nodes_down(out, overrides, nodes)


# -- running and measuring ------------------------------------------------------------------------


@dataclass(slots=True)
class JobOutcome:
    job: str
    queue: str
    submitted: int
    gpu_milli: int  # per task x tasks at full size (for reading, not for the integrals)
    first_dispatch: int | None = None
    finished: int | None = None
    preemptions: int = 0

    @property
    def wait_ms(self) -> int | None:
        return None if self.first_dispatch is None else self.first_dispatch - self.submitted


@dataclass(slots=True)
class Outcome:
    """One re-simulation's results."""

    jobs: dict[str, JobOutcome] = field(default_factory=dict)
    gpu_ms: dict[str, float] = field(default_factory=dict)  # queue -> allocated gpu (milli) x ms
    capacity_gpu_ms: float = 0.0
    start: int = 0
    end: int = 0
    rejected: int = 0
    # Jobs still pending at the end, per queue, by the core's reason kind (capacity, quota,
    # limit, behind, ...): why a change left them waiting.
    waiting_for: dict[str, dict[str, int]] = field(default_factory=dict)


class _Recorder(Simulator):
    """The simulator, remembering every record it appends (to measure finishes and capacity)."""

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[tuple[int, Event | NodeDown]] = []

    def _append(self, ts: int, event: Event) -> None:
        self.appended.append((ts, event))
        super()._append(ts, event)

    def _node_down(self, ts: int, text: str, directive: NodeDown) -> None:
        if directive.node in self.state.nodes:  # from then on it neither runs nor offers GPUs
            self.appended.append((ts, directive))
        super()._node_down(ts, text, directive)


def simulate(items: Iterable[Item]) -> Outcome:
    """Re-simulates the workload with the built-in agent and measures each job and queue."""
    lines = []
    for ts, event in items:
        if isinstance(event, NodeDown):
            # The directive as a simulate file spells it, decoded by the simulator itself.
            body: dict[str, Any] = {"type": "NodeDown", "ts": ts, "node": event.node}
        else:
            body = event_to_wire(event)
            body["ts"] = ts
        lines.append(orjson.dumps(body))
    simulator = _Recorder()
    output = list(simulator.run(lines))
    outcome = Outcome()
    queue_of: dict[str, str] = {}
    for ts, event in simulator.appended:
        if isinstance(event, JobSubmitted):
            queue_of[event.job] = event.queue
            outcome.jobs[event.job] = JobOutcome(
                event.job,
                event.queue,
                ts,
                gpu_to_milli(event.resources.gpu) * event.tasks,
            )
    running: dict[tuple[str, str, int], tuple[int, int]] = {}  # (job, node, attempt) -> (ts, gpu)
    times = [ts for ts, _ in simulator.appended]
    outcome.start = min(times) if times else 0
    outcome.end = max(times) if times else 0
    for item in output:
        if item["type"] == "Rejected":
            outcome.rejected += 1
            continue
        job = outcome.jobs.get(item["job"])
        if item["type"] == Dispatch.__name__:
            if job is not None and job.first_dispatch is None:
                job.first_dispatch = item["ts"]
            gpu = gpu_to_milli(item["resources"].get("gpu", 0)) * item["tasks"]
            running[(item["job"], item["node"], item["attempt"])] = (item["ts"], gpu)
        elif item["type"] == Preempt.__name__ and job is not None and item["reason"] != "cancelled":
            job.preemptions += 1
    # Allocations end when the agent reports the tasks gone (finish or preempt).
    capacity: dict[str, int] = {}
    capacity_since = outcome.start
    current = 0
    for ts, event in simulator.appended:
        if isinstance(event, NodeDown):
            outcome.capacity_gpu_ms += current * (ts - capacity_since)
            capacity_since = ts
            current -= capacity.pop(event.node, 0)
            for gone in [k for k in running if k[1] == event.node]:
                since, gpu = running.pop(gone)
                owner = queue_of.get(gone[0], "?")
                outcome.gpu_ms[owner] = outcome.gpu_ms.get(owner, 0.0) + gpu * (ts - since)
        elif isinstance(event, NodeHeartbeat):
            milli = gpu_to_milli(event.capacity.gpu)
            if capacity.get(event.node) != milli:
                outcome.capacity_gpu_ms += current * (ts - capacity_since)
                capacity_since = ts
                current += milli - capacity.get(event.node, 0)
                capacity[event.node] = milli
        elif isinstance(event, JobFinished | JobPreempted):
            key = (event.job, event.node, event.attempt)
            began = running.pop(key, None)
            if began is not None:
                queue = queue_of.get(key[0], "?")
                outcome.gpu_ms[queue] = outcome.gpu_ms.get(queue, 0.0) + began[1] * (ts - began[0])
            if isinstance(event, JobFinished) and key[0] in outcome.jobs:
                outcome.jobs[key[0]].finished = ts
    for (job_id, _, _), (began_ts, gpu) in running.items():
        queue = queue_of.get(job_id, "?")
        outcome.gpu_ms[queue] = outcome.gpu_ms.get(queue, 0.0) + gpu * (outcome.end - began_ts)
    outcome.capacity_gpu_ms += current * (outcome.end - capacity_since)
    state = simulator.state
    for queue_id in sorted(state.queues):
        for entry in pending_view(state, queue_id, state.ts):
            kinds = outcome.waiting_for.setdefault(queue_id, {})
            kinds[entry.reason.kind.value] = kinds.get(entry.reason.kind.value, 0) + 1
    return outcome


# -- comparing ------------------------------------------------------------------------------------


def p95(values: list[float]) -> float | None:
    """Nearest-rank 95th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(outcome: Outcome) -> dict[str, dict[str, Any]]:
    """Per queue and `*` for all: jobs, started, mean and p95 wait (s), utilisation, preemptions.

    Waits count jobs that started; jobs that never started are counted apart. Utilisation is
    the queue's GPU time over the whole cluster's GPU time between the first and last record.
    """
    groups: dict[str, list[JobOutcome]] = {}
    for job in outcome.jobs.values():
        groups.setdefault(job.queue, []).append(job)
    groups[WILDCARD] = list(outcome.jobs.values())
    summary: dict[str, dict[str, Any]] = {}
    for queue in sorted(groups):
        jobs = groups[queue]
        waits = [j.wait_ms / 1000 for j in jobs if j.wait_ms is not None]
        used = sum(outcome.gpu_ms.values()) if queue == WILDCARD else outcome.gpu_ms.get(queue, 0.0)
        summary[queue] = {
            "jobs": len(jobs),
            "never_started": sum(1 for j in jobs if j.first_dispatch is None),
            "mean_wait_s": _mean(waits),
            "p95_wait_s": p95(waits),
            "utilisation": (used / outcome.capacity_gpu_ms) if outcome.capacity_gpu_ms else None,
            "preemptions": sum(j.preemptions for j in jobs),
            "waiting_for": _waiting_for(outcome, queue),
        }
    return summary


def _waiting_for(outcome: Outcome, queue: str) -> dict[str, int]:
    """Jobs still pending at the end by reason kind (all queues for `*`), kinds sorted."""
    counts: dict[str, int] = {}
    for queue_id, kinds in outcome.waiting_for.items():
        if queue in (WILDCARD, queue_id):
            for kind, count in kinds.items():
                counts[kind] = counts.get(kind, 0) + count
    return dict(sorted(counts.items()))


@dataclass(slots=True)
class Comparison:
    baseline: Outcome
    changed: Outcome

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {"baseline": summarize(self.baseline), "whatif": summarize(self.changed)}

    def job_rows(self) -> list[dict[str, Any]]:
        """Every job whose wait, start or preemptions differ, largest change first."""
        rows = []
        for job_id in sorted(self.baseline.jobs):
            before = self.baseline.jobs[job_id]
            after = self.changed.jobs.get(job_id)
            if after is None:
                continue
            if (before.wait_ms, before.preemptions) == (after.wait_ms, after.preemptions):
                continue
            delta = None
            if before.wait_ms is not None and after.wait_ms is not None:
                delta = (after.wait_ms - before.wait_ms) / 1000
            rows.append(
                {
                    "job": job_id,
                    "queue": before.queue,
                    "wait_s_before": None if before.wait_ms is None else before.wait_ms / 1000,
                    "wait_s_after": None if after.wait_ms is None else after.wait_ms / 1000,
                    "delta_s": delta,
                    "preemptions_before": before.preemptions,
                    "preemptions_after": after.preemptions,
                }
            )

        def largest_first(row: dict[str, Any]) -> tuple[float, str]:
            delta = row["delta_s"]
            return (-(abs(float(delta)) if delta is not None else math.inf), str(row["job"]))

        rows.sort(key=largest_first)
        return rows


def compare(records: Iterable[JournalRecord], overrides: Overrides) -> Comparison:
    items = workload(records)
    if not any(isinstance(e, JobSubmitted) for _, e in items):
        raise WhatIfError("the journal holds no submitted jobs: nothing to compare")
    return Comparison(simulate(items), simulate(with_overrides(items, overrides)))
