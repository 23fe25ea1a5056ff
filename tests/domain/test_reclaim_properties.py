"""Property (issue's wording, contract section 6): on random clusters, queue trees and
workloads, once the simulator has settled, no queue with pending work that fits is below
min(deserved quota, its demand) while another queue is above its deserved quota with
preemptible jobs, unless explain names the reason (limit, non-preemptible or interactive
victims, node selector); and no two jobs preempt each other back and forth."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.pending import pending_view
from domain.quota import UNLIMITED
from domain.reasons import ReasonKind
from domain.state import Job, JobStatus, Queue, State
from tests.domain.test_preemption_properties import CheckedSimulator

GPU = 1000
# Why a job may wait although another queue is above its deserved quota (the list):
# a limit on its path, or (interactive / non-preemptible) work admitted only within quota.
EXCUSED = {ReasonKind.LIMIT, ReasonKind.QUOTA}


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Wire lines for `quotaflow simulate`: nodes (some labelled), a queue tree (top-level
    queues, one of them perhaps a parent of two whose quotas fit in its own), quotas that may
    add up to more than the cluster, limits, then waves of jobs on leaf queues: plain,
    non-preemptible, interactive or pinned to a label."""
    lines: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 3))):
        labels = {"zone": "x"} if draw(st.booleans()) else {}
        capacity = {"gpu": draw(st.sampled_from([1, 2, 4, 8])), "cpu": 64000, "memory": 512000}
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index}", "capacity": capacity}
            | ({"labels": labels} if labels else {})
        )
    leaves: list[str] = []

    def configure(name: str, quota: int, parent: str | None = None) -> None:
        limit = quota + draw(st.integers(0, 4)) if draw(st.integers(0, 4)) == 0 else -1
        body: dict[str, Any] = {
            "type": "QueueConfigured",
            "ts": 0,
            "queue": name,
            "resources": {"gpu": {"quota": quota, "limit": limit}},
        }
        if parent is not None:
            body["parent"] = parent
        lines.append(body)

    for index in range(draw(st.integers(2, 3))):
        name = f"q{index}"
        quota = draw(st.integers(0, 8))
        configure(name, quota)
        if index == 0 and draw(st.booleans()):
            first = draw(st.integers(0, quota))
            configure(f"{name}a", first, name)
            configure(f"{name}b", draw(st.integers(0, quota - first)), name)
            leaves += [f"{name}a", f"{name}b"]
        else:
            leaves.append(name)
    serial = 0
    for wave in range(1, draw(st.integers(2, 4)) + 1):
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["plain"] * 5 + ["pinned", "interactive", "zone"]))
            body = {
                "type": "JobSubmitted",
                "ts": wave * 1000,
                "job": f"j{serial}",
                "queue": draw(st.sampled_from(leaves)),
                "resources": {"gpu": draw(st.sampled_from([1, 1, 2, 3, 4]))},
            }
            if kind == "pinned":
                body["preemptible"] = False
            elif kind == "interactive":
                body["interactive"] = True
            elif kind == "zone":
                body["node_selector"] = {"zone": "x"}
            lines.append(body)
            serial += 1
    return lines


def deserved(queue: Queue) -> int:
    return queue.quota.quota[0]


def above_deserved(state: State, queue_id: str, other_id: str) -> bool:
    """Whether every entity of `queue_id`'s side strictly below where it meets `other_id`'s
    path (the queue, then each enclosing subtree) is above its deserved quota."""
    others = {q.id for q in state.ancestors(other_id)}
    for queue in state.ancestors(queue_id):
        if queue.id in others:
            break
        quota = deserved(queue)
        if quota == UNLIMITED or queue.subtree_allocated.gpu <= quota:
            return False
    return True


def within_deserved(state: State, job: Job, other_id: str) -> bool:
    """Whether every entity of the job's side below the meeting point stays within its
    deserved quota once the job runs (the reclaimer's promise)."""
    others = {q.id for q in state.ancestors(other_id)}
    size = job.per_task.gpu * job.tasks
    for queue in state.ancestors(job.queue):
        if queue.id in others:
            break
        quota = deserved(queue)
        if quota != UNLIMITED and queue.subtree_allocated.gpu + size > quota:
            return False
    return True


def victims_free_room(state: State, job: Job) -> bool:
    """Whether some live node matching the job's selector could hold it once the preemptible,
    unattended jobs there of the queues it may take from (above their deserved quota where
    the paths meet, the job staying within its own) stopped: the job "fits"."""
    takeable = {
        queue_id
        for queue_id in state.queues
        if queue_id != job.queue
        and above_deserved(state, queue_id, job.queue)
        and within_deserved(state, job, queue_id)
    }
    for node in state.nodes.values():
        if node.lost or not node.matches(job.node_selector):
            continue
        room = node.capacity.gpu - node.allocated.gpu
        for job_id, tasks in node.jobs.items():
            victim = state.jobs[job_id]
            if victim.queue in takeable and victim.preemptible and not victim.interactive:
                room += victim.per_task.gpu * tasks
        if room >= job.per_task.gpu:
            return True
    return False


def _inputs_before(lines: list[dict[str, Any]], ts: int) -> int:
    """How many input lines came at or before `ts`: preemptions with the same count saw the
    same demand."""
    return sum(1 for line in lines if line["ts"] <= ts)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(lines=scenarios())
def test_no_queue_waits_below_its_deserved_quota_while_another_is_above_its_own(
    lines: list[dict[str, Any]],
) -> None:
    simulator = CheckedSimulator()  # capacity, devices and limits after every step; no loop
    out = list(simulator.run(orjson.dumps(line) for line in lines))
    # No preemption cycles: never X by Y and Y by X with nothing else happening in between
    # (the contract: X may not preempt Y if Y could preempt X right back). A reversal after
    # new demand arrived is not a cycle: at ts 2000 j0 of q1 may reclaim j1 of q0a, q0 being
    # far above its share, and at ts 3000, once q1's 4-GPU job runs, j1 may take the room back.
    # A move (reason consolidation: the job runs on elsewhere) is not taking a job's room.
    preempts = [
        o
        for o in out
        if o["type"] == "Preempt" and o.get("by") and o.get("reason") != "consolidation"
    ]
    pairs = {(o["job"], o["by"], _inputs_before(lines, o["ts"])) for o in preempts}
    reversed_pairs = {(by, job, moment) for job, by, moment in pairs}
    assert not reversed_pairs & pairs, "preemption back and forth"
    state = simulator.state
    for queue_id in sorted(state.queues):
        queue = state.queues[queue_id]
        view = pending_view(state, queue_id, state.ts)
        if not view or queue.children:
            continue
        head = state.jobs[view[0].job]  # what the queue's policy tries first
        quota = deserved(queue)
        size = head.per_task.gpu * head.tasks
        if quota in (0, UNLIMITED) or queue.allocated.gpu + size > quota:
            continue  # nothing deserved, or the head job is beyond what it deserves
        if not victims_free_room(state, head):
            continue  # no queue above its deserved quota runs preemptible work that makes room
        reason = view[0].reason
        assert reason.kind in EXCUSED, (
            f"{queue_id} holds {queue.allocated.gpu / GPU} of {quota / GPU} deserved GPUs; "
            f"{head.id} ({size / GPU} GPUs) waits: {reason.kind} {reason.text}"
        )
    assert all(job.status is not JobStatus.STOPPING for job in state.jobs.values())
