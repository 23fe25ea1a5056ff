"""Evolve: apply one accepted journal event to the state; never emits commands (pure)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import singledispatch

from domain.dependencies import unmet, wait
from domain.devices import DeviceLayout
from domain.entities import TIME_LIMIT_TIMER as TIME_LIMIT
from domain.events import (
    ClusterConfigured,
    Event,
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeHeartbeat,
    NodesAlive,
    QueueConfigured,
    QueueDeleted,
    Tick,
)
from domain.liveness import file_deadline
from domain.nodes import note_holder
from domain.quota import QuotaSpec
from domain.state import Job, JobStatus, Node, Queue, State


def evolve(state: State, event: Event, seq: int, ts: int) -> None:
    # The handler per event type, looked up once: singledispatch's own cache is a
    # WeakKeyDictionary read in Python, a cost on every journal record.
    kind = type(event)
    handler = _HANDLERS.get(kind)
    if handler is None:
        handler = _HANDLERS[kind] = _evolve.dispatch(kind)
    handler(event, state, seq, ts)


_HANDLERS: dict[type, Callable[[Event, State, int, int], None]] = {}


@singledispatch
def _evolve(event: Event, state: State, seq: int, ts: int) -> None:  # pragma: no cover
    raise TypeError(f"no evolve for {type(event).__name__}")


@_evolve.register
def _(event: Tick, state: State, seq: int, ts: int) -> None:
    return None


@_evolve.register
def _(event: QueueConfigured, state: State, seq: int, ts: int) -> None:
    spec = QuotaSpec.from_config(event)
    queue = state.queues.get(event.queue)
    if queue is None:
        queue = Queue(
            id=event.queue,
            parent=event.parent,
            priority=event.priority,
            quota=spec,
            policy=event.policy,
            preemption=event.preemption,
            config=event,
        )
        state.queues[event.queue] = queue
        _attach(state, queue)
    else:
        if queue.parent != event.parent:
            if queue.parent is not None:
                state.fair_share_dirty.add(queue.parent)  # it lost a claimant
            _move_subtree(state, queue, event.parent)
        # A policy change applies to pending jobs at once; running jobs are untouched.
        queue.priority = event.priority
        queue.quota = spec
        queue.policy = event.policy
        queue.preemption = event.preemption
        queue.config = event
    state.fair_share_stale = True
    state.fair_share_dirty.add(queue.id)
    state.needs_cycle = True
    state.configuration_changed()


def _attach(state: State, queue: Queue) -> None:
    if queue.parent is not None:
        siblings = state.queues[queue.parent].children
        siblings.append(queue.id)
        siblings.sort()


def _move_subtree(state: State, queue: Queue, new_parent: str | None) -> None:
    amount = queue.subtree_allocated
    if queue.parent is not None:
        state.queues[queue.parent].children.remove(queue.id)
        for ancestor in state.ancestors(queue.parent):
            ancestor.subtree_allocated = ancestor.subtree_allocated - amount
    queue.parent = new_parent
    _attach(state, queue)
    if new_parent is not None:
        for ancestor in state.ancestors(new_parent):
            ancestor.subtree_allocated = ancestor.subtree_allocated + amount


@_evolve.register
def _(event: QueueDeleted, state: State, seq: int, ts: int) -> None:
    queue = state.queues.pop(event.queue)
    state.pending_queues.discard(queue.id)
    state.stopped_queues.discard(queue.id)
    if queue.parent is not None:
        state.queues[queue.parent].children.remove(queue.id)
        state.fair_share_dirty.add(queue.parent)
    state.fair_share_dirty.discard(queue.id)
    state.fair_share_stale = True
    state.configuration_changed()


@_evolve.register
def _(event: ClusterConfigured, state: State, seq: int, ts: int) -> None:
    state.cluster = event
    state.configuration_changed()
    timeout_ms = event.heartbeat_timeout_s * 1000
    state.heartbeat_expiry = [
        (node.last_heartbeat_ts + timeout_ms, node.id)
        for node in state.nodes.values()
        if not node.lost
    ]
    heapq.heapify(state.heartbeat_expiry)
    state.needs_cycle = True


@_evolve.register
def _(event: NodeHeartbeat, state: State, seq: int, ts: int) -> None:
    capacity = event.capacity.to_resources()
    node = state.nodes.get(event.node)
    devices = None if event.devices is None else tuple(event.devices)
    layout = DeviceLayout.of(
        capacity.gpu, None if devices is None else (device.index for device in devices)
    )
    refile = True
    if node is None:
        node = Node(event.node, capacity, dict(event.labels), ts, devices=devices)
        node.gpus.layout = layout
        state.nodes[event.node] = node
        note_holder(state, node, event)
        state.capacity = state.capacity + capacity
        state.fair_share_stale = True
        state.needs_cycle = True
    else:
        note_holder(state, node, event)
        if node.lost:
            node.lost = False
            state.capacity = state.capacity + capacity
            state.fair_share_stale = True
            state.needs_cycle = True
        elif node.capacity != capacity:
            state.capacity = state.capacity - node.capacity + capacity
            state.fair_share_stale = True
            state.needs_cycle = True
        elif node.devices == devices and node.labels == event.labels:
            # Heard again as it was: its room, and what a cycle derived from it, stand.
            refile = node.gpus.layout != layout
        if node.labels != event.labels or node.gpus.layout != layout:
            # Room of another kind, even if less: selectors may match it, devices differ.
            state.node_index.note_grown(node.id)
            state.needs_cycle = True
        if node.labels != event.labels:
            node.labels = dict(event.labels)
        node.capacity = capacity
        node.devices = devices
        node.gpus.layout = layout
        node.last_heartbeat_ts = ts
    if refile:
        state.node_index.update(node)
    file_deadline(state, node.id, ts + state.cluster.heartbeat_timeout_s * 1000)


@_evolve.register
def _(event: NodesAlive, state: State, seq: int, ts: int) -> None:
    # A node heard again only moves its expiry; a lost or unknown one needs a full heartbeat.
    timeout_ms = state.cluster.heartbeat_timeout_s * 1000
    for node_id in sorted(event.seen):
        node = state.nodes.get(node_id)
        heard = min(event.seen[node_id], ts)
        if node is None or node.lost or heard <= node.last_heartbeat_ts:
            continue
        node.last_heartbeat_ts = heard
        file_deadline(state, node_id, heard + timeout_ms)


@_evolve.register
def _(event: JobSubmitted, state: State, seq: int, ts: int) -> None:
    job = Job(
        id=event.job,
        queue=event.queue,
        priority=event.priority,
        module=event.module,
        interactive=event.interactive,
        preemptible=event.is_preemptible,
        tasks=event.tasks,
        min_tasks=event.least_tasks,
        per_task=event.resources.to_resources(),
        node_selector=tuple(sorted((event.node_selector or {}).items())),
        order=seq,
        submitted_ts=ts,
        spec=event,
    )
    state.jobs[job.id] = job
    deps = unmet(state, event.after_ok)
    if deps:
        wait(state, job, deps)  # pending (and counted in demand) once they all succeeded
    else:
        state.add_demand(job)
        state.enqueue(job)


@_evolve.register
def _(event: JobCancelled, state: State, seq: int, ts: int) -> None:
    job = state.jobs[event.job]
    if job.status is JobStatus.PENDING:
        state.end(job, JobStatus.CANCELLED)
        return
    job.status = JobStatus.CANCELLING
    for stop in job.stopping.values():
        stop.requeue = False
    if job.placements:
        state.cancel_requests.add(job.id)
        state.needs_cycle = True


def _current(state: State, job_id: str, attempt: int) -> Job | None:
    """The live job this report is about, or None for a stale or late report."""
    job = state.jobs.get(job_id)
    if job is None or job.attempt != attempt:
        return None
    return job


@_evolve.register
def _(event: JobStarted, state: State, seq: int, ts: int) -> None:
    job = _current(state, event.job, event.attempt)
    if job is None or event.node not in job.placements:
        return
    job.started_nodes = job.started_nodes | {event.node}
    if job.started_ts is None:
        job.started_ts = ts
        if job.spec.time_limit_s is not None:
            state.add_timer(ts + job.spec.time_limit_s * 1000, TIME_LIMIT, job.id)


@_evolve.register
def _(event: JobFinished, state: State, seq: int, ts: int) -> None:
    job = _current(state, event.job, event.attempt)
    if job is None:
        # Tasks of an earlier attempt that were being stopped (e.g. after a consolidation
        # move) may end on their own before the agent acknowledges the Preempt.
        _stopped(state, event.job, event.node, event.attempt)
        return
    tasks, devices = state.take_placed(job, event.node)
    earlier = job.stopping.get(event.node)
    if earlier is not None and earlier.attempt == event.attempt:
        state.end_stop(job, event.node)
        tasks += earlier.tasks
        devices += earlier.devices
    if tasks == 0:
        return
    state.release(job, event.node, tasks, devices)
    job.finishing = True  # an elastic job winding down must not expand again
    if event.outcome == "failed":
        job.failed_on = job.failed_on or event.node
    if not job.placements and not job.stopping:
        if job.failed_on is not None or job.timed_out:
            state.fail(job)  # retried while max_retries allows
        else:
            state.end(job, JobStatus.FINISHED)
    elif not job.placements and all(stop.attempt < job.attempt for stop in job.stopping.values()):
        # Done, but a consolidation move's old tasks are still stopping: the job ends (and is
        # not requeued) once the last of them is reported gone.
        failed = job.failed_on is not None or job.timed_out
        job.status = JobStatus.FAILED if failed else JobStatus.FINISHED


@_evolve.register
def _(event: JobPreempted, state: State, seq: int, ts: int) -> None:
    _stopped(state, event.job, event.node, event.attempt)


def _stopped(state: State, job_id: str, node_id: str, attempt: int) -> None:
    """The tasks of `attempt` being stopped on the node are gone: free what they held."""
    job = state.jobs.get(job_id)
    if job is None:
        return
    stopping = job.stopping.get(node_id)
    if stopping is None or stopping.attempt != attempt:
        return
    state.end_stop(job, node_id)
    state.release(job, node_id, stopping.tasks, stopping.devices)
    state.after_tasks_gone(job)
