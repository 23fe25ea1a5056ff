"""Read models: JSON-ready answers about queues, jobs, nodes, usage and health, for the API and the CLI (pure)."""

from __future__ import annotations

from typing import Any

from domain import fairshare
from domain.state import Job, Queue, State
from projections.amounts import queue_numbers, ratio, resources_dict
from projections.explain import explain_job, pending_jobs
from projections.timelines import queue_of
from projections.usage import Series
from projections.view import View


def queue_summary(view: View, queue: Queue) -> dict[str, Any]:
    fairshare.refresh(view.state)
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
    state = view.state
    job: Job | None = state.jobs.get(job_id)
    out: dict[str, Any] = {
        "as_of": {"seq": state.seq, "ts": state.ts},
        "job": job_id,
        "queue": queue_of(view.timelines, job_id),
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
                "attempt": job.attempt,
                "retries": job.retries,
                "waiting_for": sorted(state.waiting.get(job.id, ())),
                "last_exit": last_exit(view.timelines.get(job.id, [])),
            }
        )
    return rows


def last_exit(timeline: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last reported end of an attempt (a failed one before a retry): code and reason."""
    for entry in reversed(timeline):
        if entry["event"] == "finished":
            keys = ("attempt", "outcome", "exit_code", "reason")
            return {key: entry[key] for key in keys if key in entry}
    return None


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
                "utilisation": ratio(node.allocated.gpu, node.capacity.gpu)
                if not node.lost
                else None,
                "labels": dict(node.labels),
                "jobs": dict(sorted(node.jobs.items())),
                "last_heartbeat_ts": node.last_heartbeat_ts,
            }
        )
    return {"as_of": {"seq": state.seq, "ts": state.ts}, "nodes": nodes}


def _series_view(series: Series, now: int, points: bool) -> dict[str, Any]:
    allocated, capacity = series.totals_until(now)
    last = series.points[-1] if series.points else None
    out: dict[str, Any] = {
        "allocated": resources_dict(last[1]) if last else resources_dict((0, 0, 0)),
        "capacity": resources_dict(last[2]) if last else resources_dict((0, 0, 0)),
        "utilisation": ratio(last[1][0], last[2][0]) if last else None,
        "mean_utilisation": ratio(allocated[0], capacity[0]),
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
    derived, observed = view.check.unmatched()
    return {
        "seq": view.state.seq,
        "ts": view.state.ts,
        "records": view.records,
        "duplicates_skipped": view.duplicates,
        "offsets": dict(sorted(view.offsets.items())),
        "commands_derived": view.check.commands_derived,
        "commands_observed": view.check.commands_observed,
        "derived_not_yet_observed": derived,
        "observed_not_derived": observed,
        "errors": view.errors[-20:],
        "jobs_live": len(view.state.jobs),
        "jobs_ended": len(view.state.ended_jobs),
        "pending_cycle": view.state.group_open,
    } | view.process
