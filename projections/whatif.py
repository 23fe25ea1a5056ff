"""What-if: re-simulate a journal's workload with changed queue configuration and compare (pure).

A replay cannot know how agents would have reacted to different commands, so both sides are
re-simulated with domain.simulation's built-in agent, from the journal's inputs: queue,
cluster and node configuration and job submissions at their journal `ts`, with each job's
`duration_s` (or, when it has none, the run time the journal shows: its last start to its
finish; a job still running at the end of the journal runs until then). The baseline is
the same re-simulation without overrides, so the comparison is like for like.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from domain.codec import describe_validation_error, event_to_wire
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
from domain.plugins import validation_context
from domain.resources import gpu_to_milli
from domain.simulation import Simulator

WILDCARD = "*"


class WhatIfError(ValueError):
    """A policy file or journal that cannot be compared; the message says what to fix."""


# -- the policy file ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Overrides:
    """Queue overrides by queue id (`*` for every queue) and cluster overrides."""

    queues: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cluster: Mapping[str, Any] = field(default_factory=dict)


def parse_overrides(document: Any) -> Overrides:
    """`{"queues": {id or "*": {field: value, ...}}, "cluster": {...}}`, as loaded from YAML."""
    if not isinstance(document, Mapping):
        raise WhatIfError(
            "policy file: expected a mapping with `queues:` (and optionally `cluster:`)"
        )
    unknown = sorted(set(document) - {"queues", "cluster"})
    if unknown:
        raise WhatIfError(
            f"policy file: unknown key(s) {', '.join(map(str, unknown))} (known: queues, cluster)"
        )
    queues = document.get("queues") or {}
    cluster = document.get("cluster") or {}
    if not isinstance(queues, Mapping) or not all(isinstance(v, Mapping) for v in queues.values()):
        raise WhatIfError("policy file: `queues` maps queue ids (or *) to field overrides")
    if not isinstance(cluster, Mapping):
        raise WhatIfError("policy file: `cluster` maps ClusterConfigured fields to values")
    for name, fields in queues.items():
        if "queue" in fields:
            raise WhatIfError(f"policy file: queues.{name}: a queue cannot be renamed")
    return Overrides(queues={str(k): dict(v) for k, v in queues.items()}, cluster=dict(cluster))


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _override_queue(event: QueueConfigured, overrides: Overrides) -> QueueConfigured:
    body = event_to_wire(event)
    for name in (WILDCARD, event.queue):
        if name in overrides.queues:
            body = _merge(body, overrides.queues[name])
    try:
        return QueueConfigured.model_validate(body, context=validation_context())
    except ValidationError as exc:
        raise WhatIfError(f"queue {event.queue}: {describe_validation_error(exc)}") from None


def _override_cluster(event: ClusterConfigured, overrides: Overrides) -> ClusterConfigured:
    body = _merge(event_to_wire(event), overrides.cluster)
    try:
        return ClusterConfigured.model_validate(body)
    except ValidationError as exc:
        raise WhatIfError(f"cluster: {describe_validation_error(exc)}") from None


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


def with_overrides(
    items: Iterable[tuple[int, Event]], overrides: Overrides
) -> list[tuple[int, Event]]:
    out: list[tuple[int, Event]] = []
    seen_queues: set[str] = set()
    for ts, event in items:
        if isinstance(event, QueueConfigured):
            seen_queues.add(event.queue)
            event = _override_queue(event, overrides)
        elif isinstance(event, ClusterConfigured):
            event = _override_cluster(event, overrides)
        out.append((ts, event))
    missing = sorted(set(overrides.queues) - seen_queues - {WILDCARD})
    if missing:
        raise WhatIfError(f"policy file names queue(s) not in the journal: {', '.join(missing)}")
    if overrides.cluster and not any(isinstance(e, ClusterConfigured) for _, e in out):
        # The journal never configured the cluster: the override applies from the start.
        first = out[0][0] if out else 0
        out.insert(0, (first, _override_cluster(ClusterConfigured(), overrides)))
    return out


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
        self.appended: list[tuple[int, Event]] = []

    def _append(self, ts: int, event: Event) -> None:
        self.appended.append((ts, event))
        super()._append(ts, event)


def simulate(items: Iterable[tuple[int, Event]]) -> Outcome:
    """Re-simulates the workload with the built-in agent and measures each job and queue."""
    lines = []
    for ts, event in items:
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
        if isinstance(event, NodeHeartbeat):
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


# -- rendering --------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render(comparison: Comparison, job_limit: int = 20) -> str:
    from projections.tables import table

    summary = comparison.summary()
    rows = []
    for queue in sorted(summary["baseline"], key=lambda q: (q == WILDCARD, q)):
        b, w = summary["baseline"][queue], summary["whatif"].get(queue, {})
        rows.append(
            [
                "(all)" if queue == WILDCARD else queue,
                str(b["jobs"]),
                f"{_fmt(b['mean_wait_s'])} -> {_fmt(w.get('mean_wait_s'))}",
                f"{_fmt(b['p95_wait_s'])} -> {_fmt(w.get('p95_wait_s'))}",
                f"{_fmt(_pct(b['utilisation']))} -> {_fmt(_pct(w.get('utilisation')))}",
                f"{b['preemptions']} -> {w.get('preemptions', 0)}",
                f"{b['never_started']} -> {w.get('never_started', 0)}",
            ]
        )
    out = [
        "summary per queue (baseline -> what-if):",
        table(
            [
                "QUEUE",
                "JOBS",
                "MEAN WAIT s",
                "P95 WAIT s",
                "GPU UTIL %",
                "PREEMPTIONS",
                "NEVER STARTED",
            ],
            rows,
        ),
    ]
    changed = comparison.job_rows()
    out.append("")
    if not changed:
        out.append("no job's outcome differs")
    else:
        shown = changed if job_limit <= 0 else changed[:job_limit]
        out.append(
            f"jobs whose outcome differs: {len(changed)}"
            + (f" (largest {len(shown)} shown)" if len(shown) < len(changed) else "")
        )
        out.append(
            table(
                ["JOB", "QUEUE", "WAIT s BEFORE", "WAIT s AFTER", "DELTA s", "PREEMPTED"],
                [
                    [
                        r["job"],
                        r["queue"],
                        _fmt(r["wait_s_before"]),
                        _fmt(r["wait_s_after"]),
                        _fmt(r["delta_s"]),
                        f"{r['preemptions_before']} -> {r['preemptions_after']}",
                    ]
                    for r in shown
                ],
            )
        )
    return "\n".join(out)


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100
