"""State to canonical snapshot bytes and back, exactly as a fold would have left it (pure).

A snapshot is the whole `State` as one JSON document (orjson, sorted keys). Everything the
fold reads is in it, including what only affects *how* it iterates: dicts whose insertion
order a cycle walks are written as lists of pairs in that order, heaps as their list layout,
counters (`freed`, the node index's version) and per-group flags as they are. Sets are
written sorted (the core never depends on a set's order). Derived indexes (the node index's
sorted entries and free total, the timer set, each queue's quota spec) are rebuilt on load.
So `decode(encode(s))` folds on exactly as `s` would, and encoding the two gives equal bytes.

`FORMAT_VERSION` names the layout; a snapshot of another version is refused on load (the
scheduler then falls back to an older snapshot or to the journal), never misread.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from domain import fairshare
from domain.events import ClusterConfigured, QueueConfigured
from domain.quota import QuotaSpec
from domain.snapshot_entities import event_dict as _event
from domain.snapshot_entities import job_dict as _job
from domain.snapshot_entities import load_job as _load_job
from domain.snapshot_entities import load_node as _load_node
from domain.snapshot_entities import load_res as _load_res
from domain.snapshot_entities import model as _model
from domain.snapshot_entities import node_dict as _node
from domain.snapshot_entities import res as _res
from domain.state import Job, JobStatus, NodeIndex, PendingIndex, Queue, State

__all__ = ["FORMAT_VERSION", "SnapshotError", "decode_state", "digest", "encode_state"]

# 2: a job's pending reason is structured (domain.reasons); 3: GPU devices (domain.devices)
FORMAT_VERSION = 3
FORMAT = "quotaflow.state"

# Fields rebuilt on load rather than written: derived from other fields.
DERIVED_STATE = frozenset(
    {
        "node_index",
        "timer_set",
        "fair_share_levels",
        "fair_share_due",
        "hold_changes",
        "awaiting_checked",
        "stops_ended",
        "awaited_by",
        "awaiting_set",
        "configuration_memo",
        "configuration_changes",
        "failed_plans",
        "shape_keys",
        "pending_queues",  # State.__post_init__ builds both from the loaded queues
        "stopped_queues",
    }
)
# quota, policy and preemption come from its QueueConfigured; least_task and stoppable_on a
# loaded queue counts again from its jobs when first asked (State.least_task and
# State.stoppable_on, domain/allocation.py).
DERIVED_QUEUE = frozenset({"quota", "policy", "preemption", "least_task", "stoppable_on"})
# Memos: a loaded node starts without them.
DERIVED_NODE = frozenset({"copies_memo", "lifting_memo"})
DERIVED_JOB = frozenset({"shape_key"})  # a shared key: a loaded job is given one when asked


class SnapshotError(ValueError):
    """Bytes that are not a snapshot this code can load; the message says why."""


def digest(body: bytes) -> str:
    """The snapshot's hash as written next to it: sha256 of the canonical bytes, in hex."""
    return hashlib.sha256(body).hexdigest()


# -- encode -------------------------------------------------------------------------------


def encode_state(state: State) -> bytes:
    """The canonical bytes of `state`: equal states (as the fold sees them) give equal bytes.
    Fair shares are brought up to date first, so the bytes do not depend on whether the last
    cycles left them to be recomputed when read (domain.decider)."""
    fairshare.refresh(state)
    document = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "seq": state.seq,
        "ts": state.ts,
        "state": state_to_dict(state),
    }
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def state_to_dict(state: State) -> dict[str, Any]:
    return {
        "cluster": _event(state.cluster),
        "queues": [[key, _queue(queue)] for key, queue in state.queues.items()],
        "nodes": [[key, _node(node)] for key, node in state.nodes.items()],
        "jobs": [[key, _job(job)] for key, job in state.jobs.items()],
        "ended_jobs": [[key, status.value] for key, status in state.ended_jobs.items()],
        "node_index_version": state.node_index.version,
        "capacity": _res(state.capacity),
        "seq": state.seq,
        "ts": state.ts,
        "group_open": state.group_open,
        "needs_cycle": state.needs_cycle,
        "fair_share_stale": state.fair_share_stale,
        "fair_share_dirty": sorted(state.fair_share_dirty),
        "fair_share_full": state.fair_share_full,
        "timers": [list(timer) for timer in state.timers],
        "freed": state.freed,
        "cancel_requests": sorted(state.cancel_requests),
        "elastic_placed": sorted(state.elastic_placed),
        "holders": sorted(state.holders),
        "heartbeat_expiry": [list(entry) for entry in state.heartbeat_expiry],
        "reconcile_requests": [
            [node, sorted([job, attempt] for job, attempt in running)]
            for node, running in state.reconcile_requests.items()
        ],
        "waiting": [[job, sorted(deps)] for job, deps in state.waiting.items()],
        "dependents": [[dep, list(jobs)] for dep, jobs in state.dependents.items()],
        "dependency_failed": [[job, dep] for job, dep in state.dependency_failed.items()],
    }


def _queue(queue: Queue) -> dict[str, Any]:
    return {
        "id": queue.id,
        "parent": queue.parent,
        "priority": queue.priority,
        "config": _event(queue.config),
        "children": list(queue.children),
        "pending": [
            [[interactive, priority], [list(pair) for pair in pairs]]
            for (interactive, priority), pairs in queue.pending.saved()
        ],
        "running": sorted(queue.running),
        "allocated": _res(queue.allocated),
        "subtree_allocated": _res(queue.subtree_allocated),
        "demand": _res(queue.demand),
        "jobs": queue.jobs,
        "fair_share": _floats(queue.fair_share),
        "own_fair_share": _floats(queue.own_fair_share),
        "capped_demand": _floats(queue.capped_demand),
        "stopping": _res(queue.stopping),
        "held": _res(queue.held),
        "protected": _res(queue.protected),
        "stopped_by": queue.stopped_by,
        "stopped_policy": queue.stopped_policy,
    }


def _floats(values: tuple[float, float, float]) -> list[float | str]:
    # JSON has no infinity or NaN (orjson would write null): keep them exact as text.
    return [value if math.isfinite(value) else repr(value) for value in values]


# -- decode -------------------------------------------------------------------------------


def decode_state(body: bytes) -> State:
    """The state a snapshot captured; raises SnapshotError on anything it cannot trust."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SnapshotError(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise SnapshotError("not a quotaflow state snapshot")
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise SnapshotError(
            f"snapshot format version {version!r}; this code reads {FORMAT_VERSION}"
        )
    try:
        return state_from_dict(document["state"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SnapshotError(f"snapshot does not decode: {exc!r}") from None


def state_from_dict(data: dict[str, Any]) -> State:
    jobs = {key: _load_job(value) for key, value in data["jobs"]}
    state = State(
        cluster=_model(data["cluster"], ClusterConfigured),
        queues={key: _load_queue(value, jobs) for key, value in data["queues"]},
        nodes={key: _load_node(value) for key, value in data["nodes"]},
        jobs=jobs,
        ended_jobs={key: JobStatus(value) for key, value in data["ended_jobs"]},
        capacity=_load_res(data["capacity"]),
        seq=int(data["seq"]),
        ts=int(data["ts"]),
        group_open=bool(data["group_open"]),
        needs_cycle=bool(data["needs_cycle"]),
        fair_share_stale=bool(data["fair_share_stale"]),
        fair_share_dirty=set(data["fair_share_dirty"]),
        fair_share_full=bool(data["fair_share_full"]),
        timers=[(int(due), str(kind), str(ident)) for due, kind, ident in data["timers"]],
        freed=int(data["freed"]),
        cancel_requests=set(data["cancel_requests"]),
        elastic_placed=set(data["elastic_placed"]),
        holders=set(data["holders"]),
        heartbeat_expiry=[(int(due), str(node)) for due, node in data["heartbeat_expiry"]],
        reconcile_requests={
            str(node): frozenset((str(job), int(attempt)) for job, attempt in running)
            for node, running in data["reconcile_requests"]
        },
        waiting={str(job): set(deps) for job, deps in data.get("waiting", [])},
        dependents={str(dep): list(jobs) for dep, jobs in data.get("dependents", [])},
        dependency_failed={str(job): str(dep) for job, dep in data.get("dependency_failed", [])},
    )
    state.timer_set = set(state.timers)
    state.node_index = _load_node_index(state, int(data["node_index_version"]))
    return state


def _load_node_index(state: State, version: int) -> NodeIndex:
    index = NodeIndex()
    for node in state.nodes.values():
        index.update(node)  # lost nodes are left out, as the fold leaves them out
    index.version = version
    return index


def _load_queue(data: dict[str, Any], jobs: dict[str, Job]) -> Queue:
    config = _model(data["config"], QueueConfigured)
    pending = PendingIndex.restored(
        [
            ((bool(interactive), int(priority)), [(int(o), str(j)) for o, j in pairs])
            for (interactive, priority), pairs in data["pending"]
        ],
        jobs,
    )
    return Queue(
        id=data["id"],
        parent=data["parent"],
        priority=int(data["priority"]),
        quota=QuotaSpec.from_config(config),
        policy=config.policy,
        preemption=config.preemption,
        config=config,
        children=list(data["children"]),
        pending=pending,
        running=set(data["running"]),
        allocated=_load_res(data["allocated"]),
        subtree_allocated=_load_res(data["subtree_allocated"]),
        demand=_load_res(data["demand"]),
        jobs=int(data["jobs"]),
        fair_share=_load_floats(data["fair_share"]),
        own_fair_share=_load_floats(data["own_fair_share"]),
        capped_demand=_load_floats(data["capped_demand"]),
        stopping=_load_res(data["stopping"]),
        held=_load_res(data["held"]),
        protected=_load_res(data["protected"]),
        stopped_by=data["stopped_by"],
        stopped_policy=data["stopped_policy"],
    )


def _load_floats(values: list[float | str]) -> tuple[float, float, float]:
    first, second, third = (float(value) for value in values)
    return (first, second, third)
