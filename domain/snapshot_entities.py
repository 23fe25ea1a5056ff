"""Snapshot parts for nodes and jobs, their devices included, and the shared encoders (pure).

Split from domain/snapshot.py, which writes and reads the whole State; the same rules hold
(dicts a cycle walks in insertion order are lists of pairs in that order, sets sorted).
A node's per-device use is written sorted by device index (the core never walks it
unsorted); its device layout is rebuilt on load from its capacity and listed devices.
"""

from __future__ import annotations

from typing import Any, TypeVar

from domain.devices import Assignment, DeviceLayout, NodeDevices, Usage
from domain.events import EVENT_TYPES, Device, JobSubmitted
from domain.reasons import Reason
from domain.resources import Resources
from domain.state import Job, JobStatus, Node, Stopping
from domain.wire_types import Strict

E = TypeVar("E", bound=Strict)


def event_dict(event: Strict) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=False)


def res(amount: Resources) -> list[int]:
    return [amount.gpu, amount.cpu, amount.memory]


def model(data: dict[str, Any], cls: type[E]) -> E:
    if EVENT_TYPES.get(str(data.get("type"))) is not cls:
        raise ValueError(f"expected a {cls.__name__}, got {data.get('type')!r}")
    return cls.model_validate(data)


def load_res(values: list[int]) -> Resources:
    gpu, cpu, memory = values
    return Resources(int(gpu), int(cpu), int(memory))


# -- devices ------------------------------------------------------------------------------


def _usage(amounts: Usage) -> list[list[int]]:
    return [[index, amounts[index]] for index in sorted(amounts)]


def _load_usage(pairs: list[list[int]]) -> Usage:
    return {int(index): int(amount) for index, amount in pairs}


def _assignments(devices: tuple[Assignment, ...]) -> list[list[int]]:
    return [list(task) for task in devices]


def _load_assignments(tasks: list[list[int]]) -> tuple[Assignment, ...]:
    return tuple(tuple(int(index) for index in task) for task in tasks)


# -- nodes --------------------------------------------------------------------------------


def node_dict(node: Node) -> dict[str, Any]:
    return {
        "id": node.id,
        "capacity": res(node.capacity),
        "labels": [[key, value] for key, value in node.labels.items()],
        "last_heartbeat_ts": node.last_heartbeat_ts,
        "allocated": res(node.allocated),
        "held": res(node.held),
        "stopping": res(node.stopping),
        "lost": node.lost,
        "jobs": [[key, tasks] for key, tasks in node.jobs.items()],
        "instance": node.instance,
        "incarnation": node.incarnation,
        "devices": None if node.devices is None else [d.model_dump() for d in node.devices],
        "gpus": {
            "used": _usage(node.gpus.used),
            "stopping": _usage(node.gpus.stopping),
            "held": _usage(node.gpus.held),
        },
    }


def load_node(data: dict[str, Any]) -> Node:
    capacity = load_res(data["capacity"])
    listed = data["devices"]
    devices = None if listed is None else tuple(Device.model_validate(d) for d in listed)
    gpus = data["gpus"]
    return Node(
        id=data["id"],
        capacity=capacity,
        labels={key: value for key, value in data["labels"]},
        last_heartbeat_ts=int(data["last_heartbeat_ts"]),
        allocated=load_res(data["allocated"]),
        held=load_res(data["held"]),
        stopping=load_res(data["stopping"]),
        lost=bool(data["lost"]),
        jobs={key: int(tasks) for key, tasks in data["jobs"]},
        instance=data["instance"],
        incarnation=int(data["incarnation"]),
        devices=devices,
        gpus=NodeDevices(
            DeviceLayout.of(capacity.gpu, None if devices is None else (d.index for d in devices)),
            _load_usage(gpus["used"]),
            _load_usage(gpus["stopping"]),
            _load_usage(gpus["held"]),
        ),
    )


# -- jobs ---------------------------------------------------------------------------------


def job_dict(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "priority": job.priority,
        "module": job.module,
        "interactive": job.interactive,
        "preemptible": job.preemptible,
        "tasks": job.tasks,
        "min_tasks": job.min_tasks,
        "per_task": res(job.per_task),
        "node_selector": [list(pair) for pair in job.node_selector],
        "order": job.order,
        "submitted_ts": job.submitted_ts,
        "spec": event_dict(job.spec),
        "status": job.status.value,
        "attempt": job.attempt,
        "placements": [[key, tasks] for key, tasks in job.placements.items()],
        "devices": [[key, _assignments(tasks)] for key, tasks in job.devices.items()],
        "stopping": [
            [key, [stop.attempt, stop.tasks, stop.requeue, _assignments(stop.devices)]]
            for key, stop in job.stopping.items()
        ],
        "started_ts": job.started_ts,
        "started_nodes": sorted(job.started_nodes),
        "blocked_since": job.blocked_since,
        "pending_reason": None if job.pending_reason is None else job.pending_reason.to_wire(),
        "held": [[key, res(amount)] for key, amount in job.held.items()],
        "held_devices": [[key, _usage(amounts)] for key, amounts in job.held_devices.items()],
        "awaiting": sorted(job.awaiting),
        "displaced_by": [[key, rule] for key, rule in job.displaced_by.items()],
        "failed_on": job.failed_on,
        "finishing": job.finishing,
        "retries": job.retries,
        "timed_out": job.timed_out,
    }


def load_job(data: dict[str, Any]) -> Job:
    return Job(
        id=data["id"],
        queue=data["queue"],
        priority=int(data["priority"]),
        module=data["module"],
        interactive=bool(data["interactive"]),
        preemptible=bool(data["preemptible"]),
        tasks=int(data["tasks"]),
        min_tasks=int(data["min_tasks"]),
        per_task=load_res(data["per_task"]),
        node_selector=tuple((str(key), str(value)) for key, value in data["node_selector"]),
        order=int(data["order"]),
        submitted_ts=int(data["submitted_ts"]),
        spec=model(data["spec"], JobSubmitted),
        status=JobStatus(data["status"]),
        attempt=int(data["attempt"]),
        placements={key: int(tasks) for key, tasks in data["placements"]},
        devices={key: _load_assignments(tasks) for key, tasks in data["devices"]},
        stopping={
            key: Stopping(int(attempt), int(tasks), bool(requeue), _load_assignments(devices))
            for key, (attempt, tasks, requeue, devices) in data["stopping"]
        },
        started_ts=data["started_ts"],
        started_nodes=frozenset(data["started_nodes"]),
        blocked_since=data["blocked_since"],
        pending_reason=None
        if data["pending_reason"] is None
        else Reason.from_wire(data["pending_reason"]),
        held={key: load_res(amount) for key, amount in data["held"]},
        held_devices={key: _load_usage(amounts) for key, amounts in data["held_devices"]},
        awaiting=frozenset(data["awaiting"]),
        displaced_by={key: rule for key, rule in data["displaced_by"]},
        failed_on=data["failed_on"],
        finishing=bool(data["finishing"]),
        retries=int(data.get("retries", 0)),
        timed_out=bool(data.get("timed_out", False)),
    )
