"""The projections' view model: the core's State folded from the journal, plus job timelines and usage over time (pure).

The view is the scheduler's own state, rebuilt with `domain.decider.fold`, so queues, fair
shares and pending reasons are exactly what the scheduler saw. Commands come from the same
fold (deterministic, in journal order); commands read from quotaflow.commands are only
checked against them. The view remembers the last journal `seq` it folded: a record seen
twice (a consumer rebalance, a restart that re-reads) is skipped, so reprocessing is harmless
and the view depends only on the journal, never on how it was delivered.

A group of records with one `ts` gets its cycle when the next `ts` arrives (as in a replay),
so the view lags the scheduler by at most one group, normally one tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from domain.commands import Dispatch, NodeCommand, Preempt
from domain.decider import close_group, fold, initial_state
from domain.events import (
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JournalRecord,
    NodeHeartbeat,
    Tick,
)
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.quota import UNLIMITED
from domain.resources import RESOURCE_NAMES, ZERO, Resources, milli_to_gpu
from domain.state import Job, JobStatus, Queue, State

MAX_POINTS = 2000  # change points kept per usage series; older ones are folded into totals


def amount(index: int, value: float) -> float | int:
    """An internal amount (gpu in thousandths) as users read it: gpu in devices."""
    if index == 0:
        if float(value).is_integer():
            return milli_to_gpu(int(value))
        return round(value / 1000, 3)
    return int(value) if float(value).is_integer() else round(value, 3)


def resources_dict(values: Iterable[float]) -> dict[str, float | int]:
    return {
        name: amount(i, v) for i, (name, v) in enumerate(zip(RESOURCE_NAMES, values, strict=True))
    }


@dataclass(slots=True)
class Series:
    """One usage series as change points (ts, allocated, capacity), with running integrals."""

    points: list[tuple[int, tuple[int, int, int], tuple[int, int, int]]] = field(
        default_factory=list
    )
    allocated_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    capacity_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    since: int | None = None
    integrated_to: int = 0  # the integrals cover [since, integrated_to)

    _last: tuple[Resources, Resources] | None = None

    def sample(self, ts: int, allocated: Resources, capacity: Resources) -> None:
        """Records the values at `ts` if they changed (integrating the previous ones up to it)."""
        last = self._last
        if last is not None:
            # Resources are immutable and replaced on change: identity is the fast path.
            if (last[0] is allocated or last[0] == allocated) and (
                last[1] is capacity or last[1] == capacity
            ):
                return
            _, last_alloc, last_cap = self.points[-1]
            span = ts - self.integrated_to
            if span > 0:
                for r in range(3):
                    self.allocated_ms[r] += last_alloc[r] * span
                    self.capacity_ms[r] += last_cap[r] * span
                self.integrated_to = ts
        else:
            self.since = self.integrated_to = ts
        self._last = (allocated, capacity)
        point = (ts, allocated.as_tuple(), capacity.as_tuple())
        if self.points and self.points[-1][0] == ts:
            self.points[-1] = point
            return
        self.points.append(point)
        if len(self.points) > MAX_POINTS:
            del self.points[: len(self.points) - MAX_POINTS]

    def totals_until(self, ts: int) -> tuple[list[float], list[float]]:
        """Integrals of allocated and capacity (amount x ms) from the first sample to `ts`."""
        allocated, capacity = list(self.allocated_ms), list(self.capacity_ms)
        if self.points:
            _, last_alloc, last_cap = self.points[-1]
            span = max(0, ts - self.integrated_to)
            for r in range(3):
                allocated[r] += last_alloc[r] * span
                capacity[r] += last_cap[r] * span
        return allocated, capacity


@dataclass(slots=True)
class View:
    """Everything the projections serve, folded from journal records (and checked commands)."""

    plugins: Plugins = DEFAULT_PLUGINS
    state: State = field(default_factory=initial_state)
    records: int = 0  # journal records folded
    duplicates: int = 0  # records skipped because already folded (seq not beyond the last)
    offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    timelines: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    queue_usage: dict[str, Series] = field(default_factory=dict)
    node_usage: dict[str, Series] = field(default_factory=dict)
    cluster_usage: Series = field(default_factory=Series)
    preemptions: dict[str, int] = field(default_factory=dict)  # victim queue -> Preempt count
    derived: dict[bytes, int] = field(default_factory=dict)  # fold's commands not yet observed
    observed: dict[bytes, int] = field(default_factory=dict)  # topic's commands not yet derived
    commands_derived: int = 0
    commands_observed: int = 0
    errors: list[str] = field(default_factory=list)
    # How the serving process got this view (resumed from a checkpoint or rebuilt, its
    # checkpoints since): shown by /health, never saved in a checkpoint.
    process: dict[str, Any] = field(default_factory=dict)
    _usage_dirty: bool = True
    _sampled_capacity: Resources = field(default_factory=Resources)

    # -- feeding --------------------------------------------------------------------------

    def apply(self, record: JournalRecord) -> list[NodeCommand]:
        """Folds one journal record; returns the commands its group boundary released."""
        if self.records and record.seq <= self.state.seq:
            self.duplicates += 1
            return []
        emitted: list[NodeCommand] = []
        if self.state.group_open and record.ts != self.state.ts:
            emitted = self._close()
        if not self._usage_dirty and _may_change_usage(self.state, record):
            self._usage_dirty = True
        self.state, more = fold(self.state, record, self.plugins)
        emitted += more  # empty: the group was closed above, exactly as fold would have
        self.records += 1
        self._timeline_event(record)
        return emitted

    def finish(self) -> list[NodeCommand]:
        """Runs the open group's cycle (end of a file or of a replay up to a time)."""
        return self._close() if self.state.group_open else []

    def _close(self) -> list[NodeCommand]:
        self.state, commands = close_group(self.state, self.plugins)
        ts = self.state.ts
        for command in commands:
            self._timeline_command(command)
            self._expect(command)
        # Series are piecewise constant and integrated lazily, so a group that changed no
        # allocation or capacity needs no sample (a lost node changes the cluster capacity).
        if commands or self._usage_dirty or self.state.capacity != self._sampled_capacity:
            self._sample(ts)
            self._usage_dirty = False
            self._sampled_capacity = self.state.capacity
        return commands

    def observe_command(self, raw: dict[str, Any]) -> None:
        """A command read from quotaflow.commands: matched against what the fold emitted."""
        self.commands_observed += 1
        key = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
        if self.derived.get(key):
            _take(self.derived, key)
        else:
            self.observed[key] = self.observed.get(key, 0) + 1

    def _expect(self, command: NodeCommand) -> None:
        self.commands_derived += 1
        key = orjson.dumps(command.to_wire(), option=orjson.OPT_SORT_KEYS)
        if self.observed.get(key):
            _take(self.observed, key)
        else:
            self.derived[key] = self.derived.get(key, 0) + 1

    def unmatched(self) -> tuple[int, int]:
        """(derived but not yet seen on the topic, seen on the topic but not derived)."""
        return sum(self.derived.values()), sum(self.observed.values())

    # -- timelines ------------------------------------------------------------------------

    def _entry(self, job: str, entry: dict[str, Any]) -> None:
        self.timelines.setdefault(job, []).append(entry)

    def _timeline_event(self, record: JournalRecord) -> None:
        event = record.event
        base = {"ts": record.ts, "seq": record.seq}
        if isinstance(event, JobSubmitted):
            self._entry(
                event.job,
                base
                | {
                    "event": "submitted",
                    "queue": event.queue,
                    "priority": event.priority,
                    "tasks": event.tasks,
                    "resources": event.resources.to_resources().to_wire(),
                    "interactive": event.interactive,
                    "preemptible": event.is_preemptible,
                },
            )
        elif isinstance(event, JobStarted):
            self._entry(
                event.job, base | {"event": "started", "node": event.node, "attempt": event.attempt}
            )
        elif isinstance(event, JobFinished):
            self._entry(
                event.job,
                base
                | {
                    "event": "finished",
                    "node": event.node,
                    "attempt": event.attempt,
                    "outcome": event.outcome,
                },
            )
        elif isinstance(event, JobPreempted):
            self._entry(
                event.job, base | {"event": "stopped", "node": event.node, "attempt": event.attempt}
            )
        elif isinstance(event, JobCancelled):
            self._entry(event.job, base | {"event": "cancel_requested"})

    def _timeline_command(self, command: NodeCommand) -> None:
        base = {
            "ts": command.ts,
            "seq": command.seq,
            "node": command.node,
            "attempt": command.attempt,
        }
        if isinstance(command, Dispatch):
            self._entry(
                command.job,
                base | {"event": "dispatched", "tasks": command.tasks, "reason": command.reason},
            )
        elif isinstance(command, Preempt):
            victim = self.state.jobs.get(command.job)
            victim_queue = victim.queue if victim is not None else _queue_of(self, command.job)
            context = self._preemption_context(victim_queue, command.by)
            self._entry(
                command.job,
                base
                | {
                    "event": "preempted",
                    "tasks": command.tasks,
                    "reason": command.reason,
                    "by": command.by,
                    "context": context,
                },
            )
            if command.by is not None:
                self._entry(
                    command.by,
                    {
                        "ts": command.ts,
                        "seq": command.seq,
                        "event": "preempting",
                        "victim": command.job,
                        "node": command.node,
                        "reason": command.reason,
                    },
                )
            if victim_queue is not None:
                self.preemptions[victim_queue] = self.preemptions.get(victim_queue, 0) + 1

    def _preemption_context(self, victim_queue: str | None, by: str | None) -> dict[str, Any]:
        """The numbers a person checks a preemption against, as they were in that cycle."""
        context: dict[str, Any] = {}
        if victim_queue is not None and victim_queue in self.state.queues:
            context["victim_queue"] = queue_numbers(self.state.queues[victim_queue])
        preemptor = self.state.jobs.get(by) if by is not None else None
        if preemptor is not None and preemptor.queue in self.state.queues:
            queue = self.state.queues[preemptor.queue]
            context["preemptor_queue"] = queue_numbers(queue)
            context["preemptor_priority"] = preemptor.priority
            context["preemptor_module"] = preemptor.module
            context["preemptor_interactive"] = preemptor.interactive
            rules = queue.preemption.model_dump(mode="json", exclude_defaults=True)
            if rules:
                context["preemptor_queue_rules"] = rules
            if queue.parent is not None and queue.parent in self.state.queues:
                parent_rules = self.state.queues[queue.parent].preemption.model_dump(
                    mode="json", exclude_defaults=True
                )
                if parent_rules:
                    context["parent_rules"] = {queue.parent: parent_rules}
        return context

    # -- usage ----------------------------------------------------------------------------

    def _sample(self, ts: int) -> None:
        state = self.state
        capacity = state.capacity
        total = ZERO
        for queue_id, queue in state.queues.items():
            series = self.queue_usage.get(queue_id)
            if series is None:
                series = self.queue_usage[queue_id] = Series()
            series.sample(ts, queue.subtree_allocated, capacity)
            if queue.parent is None:
                total = total + queue.subtree_allocated  # every job is in some queue's subtree
        for node_id, node in state.nodes.items():
            series = self.node_usage.get(node_id)
            if series is None:
                series = self.node_usage[node_id] = Series()
            series.sample(ts, node.allocated, ZERO if node.lost else node.capacity)
        self.cluster_usage.sample(ts, total, capacity)


def _may_change_usage(state: State, record: JournalRecord) -> bool:
    """Whether folding the record may change an allocation or a capacity outside a cycle."""
    event = record.event
    if isinstance(event, JobFinished | JobPreempted | JobCancelled):
        return True
    if isinstance(event, NodeHeartbeat):
        node = state.nodes.get(event.node)
        return node is None or node.lost or node.capacity != event.capacity.to_resources()
    return not isinstance(event, Tick | JobSubmitted | JobStarted)


def _take(counter: dict[bytes, int], key: bytes) -> None:
    left = counter[key] - 1
    if left:
        counter[key] = left
    else:
        del counter[key]


def _queue_of(view: View, job_id: str) -> str | None:
    for entry in view.timelines.get(job_id, ()):
        if entry["event"] == "submitted":
            return str(entry["queue"])
    return None


def build(records: Iterable[JournalRecord], plugins: Plugins = DEFAULT_PLUGINS) -> View:
    """A view of a whole journal, its last group's cycle run (as a replay ends)."""
    view = View(plugins=plugins)
    for record in records:
        view.apply(record)
    view.finish()
    return view


# -- read models (JSON-ready dicts for the API and the CLI) --------------------------------


def _limit(value: int | None, index: int) -> float | int | None:
    return None if value is None else amount(index, value)


def _quota(value: int, index: int) -> float | int | str:
    return "unlimited" if value == UNLIMITED else amount(index, value)


def queue_numbers(queue: Queue) -> dict[str, Any]:
    """Per resource: deserved quota, fair share, allocated (whole subtree), limit (None: no cap)."""
    resources: dict[str, Any] = {}
    for index, name in enumerate(RESOURCE_NAMES):
        resources[name] = {
            "deserved": _quota(queue.quota.quota[index], index),
            "fair_share": amount(index, queue.fair_share[index]),
            "allocated": amount(index, queue.subtree_allocated.as_tuple()[index]),
            "own_allocated": amount(index, queue.allocated.as_tuple()[index]),
            "limit": _limit(queue.quota.limit[index], index),
        }
    return {"queue": queue.id, "resources": resources}


def queue_summary(view: View, queue: Queue) -> dict[str, Any]:
    from projections.explain import pending_jobs

    numbers = queue_numbers(queue)
    return {
        "queue": queue.id,
        "parent": queue.parent,
        "children": list(queue.children),
        "priority": queue.priority,
        "policy": queue.policy.kind,
        "resources": numbers["resources"],
        "pending": pending_jobs(view.state, queue.id, view.state.ts),
        "running": running_jobs(view.state, queue),
        "preemptions": view.preemptions.get(queue.id, 0),
    }


def running_jobs(state: State, queue: Queue) -> list[dict[str, Any]]:
    out = []
    for job_id in sorted(queue.running, key=lambda j: (state.jobs[j].order, j)):
        job = state.jobs[job_id]
        out.append(
            {
                "job": job.id,
                "status": job.status.value,
                "priority": job.priority,
                "attempt": job.attempt,
                "nodes": dict(sorted(job.placements.items())),
                "stopping": sorted(job.stopping),
                "started_ts": job.started_ts,
                "allocation": job.allocation.to_wire(),
            }
        )
    return out


def queues_view(view: View) -> dict[str, Any]:
    state = view.state
    return {
        "as_of": {"seq": state.seq, "ts": state.ts},
        "queues": [queue_summary(view, state.queues[q]) for q in _tree_order(state)],
    }


def queue_view(view: View, queue_id: str) -> dict[str, Any] | None:
    queue = view.state.queues.get(queue_id)
    if queue is None:
        return None
    return {"as_of": {"seq": view.state.seq, "ts": view.state.ts}} | queue_summary(view, queue)


def _tree_order(state: State) -> list[str]:
    order: list[str] = []

    def visit(queue_id: str) -> None:
        order.append(queue_id)
        for child in state.queues[queue_id].children:
            visit(child)

    for top in state.top_level_queues():
        visit(top)
    return order


def job_status(state: State, job_id: str) -> str | None:
    job = state.jobs.get(job_id)
    if job is not None:
        return job.status.value
    ended = state.ended_jobs.get(job_id)
    return None if ended is None else ended.value


def job_view(view: View, job_id: str) -> dict[str, Any] | None:
    timeline = view.timelines.get(job_id)
    if timeline is None:
        return None
    from projections.explain import explain_job

    state = view.state
    job: Job | None = state.jobs.get(job_id)
    out: dict[str, Any] = {
        "as_of": {"seq": state.seq, "ts": state.ts},
        "job": job_id,
        "queue": _queue_of(view, job_id),
        "status": job_status(state, job_id),
        "timeline": timeline,
    }
    if job is not None:
        out["attempt"] = job.attempt
        out["nodes"] = dict(sorted(job.placements.items()))
    out["explanation"] = explain_job(view, job_id)
    return out


def jobs_view(view: View, queue_id: str | None = None) -> list[dict[str, Any]]:
    """Live jobs (optionally of one queue), in submission order."""
    from projections.explain import pending_jobs

    state = view.state
    positions: dict[str, dict[str, Any]] = {}
    for queue in state.queues.values():
        if queue_id is None or queue.id == queue_id:
            for item in pending_jobs(state, queue.id, state.ts):
                positions[item["job"]] = item
    rows = []
    for job in sorted(state.jobs.values(), key=lambda j: (j.order, j.id)):
        if queue_id is not None and job.queue != queue_id:
            continue
        pending = positions.get(job.id)
        rows.append(
            {
                "job": job.id,
                "queue": job.queue,
                "status": job.status.value,
                "priority": job.priority,
                "tasks": job.tasks,
                "request": job.request.to_wire(),
                "position": pending["position"] if pending else None,
                "reason": pending["reason"] if pending else None,
                "nodes": dict(sorted(job.placements.items())),
                "submitted_ts": job.submitted_ts,
            }
        )
    return rows


def nodes_view(view: View) -> dict[str, Any]:
    state = view.state
    nodes = []
    for node_id in sorted(state.nodes):
        node = state.nodes[node_id]
        nodes.append(
            {
                "node": node.id,
                "lost": node.lost,
                "capacity": node.capacity.to_wire(),
                "allocated": node.allocated.to_wire(),
                "free": node.free.to_wire(),
                "utilisation": _ratio(node.allocated.gpu, node.capacity.gpu)
                if not node.lost
                else None,
                "labels": dict(node.labels),
                "jobs": dict(sorted(node.jobs.items())),
                "last_heartbeat_ts": node.last_heartbeat_ts,
            }
        )
    return {"as_of": {"seq": state.seq, "ts": state.ts}, "nodes": nodes}


def _ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0 else round(part / whole, 4)


def _series_view(series: Series, now: int, points: bool) -> dict[str, Any]:
    allocated, capacity = series.totals_until(now)
    last = series.points[-1] if series.points else None
    out: dict[str, Any] = {
        "allocated": resources_dict(last[1]) if last else resources_dict((0, 0, 0)),
        "capacity": resources_dict(last[2]) if last else resources_dict((0, 0, 0)),
        "utilisation": _ratio(last[1][0], last[2][0]) if last else None,
        "mean_utilisation": _ratio(allocated[0], capacity[0]),
        "since_ts": series.since,
    }
    if points:
        out["points"] = [
            {"ts": ts, "allocated": resources_dict(alloc), "capacity": resources_dict(cap)}
            for ts, alloc, cap in series.points
        ]
    return out


def usage_view(view: View, points: bool = False) -> dict[str, Any]:
    """Allocated vs capacity now, and mean GPU utilisation since the first sample.

    A queue's utilisation is its share of the whole cluster's GPUs; a node's, of its own.
    """
    now = view.state.ts
    return {
        "as_of": {"seq": view.state.seq, "ts": now},
        "cluster": _series_view(view.cluster_usage, now, points),
        "queues": {q: _series_view(s, now, points) for q, s in sorted(view.queue_usage.items())},
        "nodes": {n: _series_view(s, now, points) for n, s in sorted(view.node_usage.items())},
    }


def health_view(view: View) -> dict[str, Any]:
    derived, observed = view.unmatched()
    return {
        "seq": view.state.seq,
        "ts": view.state.ts,
        "records": view.records,
        "duplicates_skipped": view.duplicates,
        "offsets": dict(sorted(view.offsets.items())),
        "commands_derived": view.commands_derived,
        "commands_observed": view.commands_observed,
        "derived_not_yet_observed": derived,
        "observed_not_derived": observed,
        "errors": view.errors[-20:],
        "jobs_live": len(view.state.jobs),
        "jobs_ended": len(view.state.ended_jobs),
        "pending_cycle": view.state.group_open,
    } | view.process


__all__ = [
    "JobStatus",
    "Series",
    "View",
    "build",
    "health_view",
    "job_view",
    "jobs_view",
    "nodes_view",
    "queue_view",
    "queues_view",
    "usage_view",
]
