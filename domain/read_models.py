"""Read models of the state: what a job, a queue or a node looks like now, as plain values (pure).

For views and tests: they show what the scheduler decided without handing out the live,
mutable state (whose indexes and sets are the cycle's business). Every collection is sorted.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain import fairshare
from domain.resources import Resources
from domain.state import JobStatus, State


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    queue: str
    status: str  # pending, running, stopping, cancelling, finished, failed, cancelled
    attempt: int
    placements: tuple[tuple[str, int], ...]  # (node, tasks) running now
    stopping: tuple[tuple[str, int], ...]  # (node, tasks) told to stop, not yet gone
    held: tuple[tuple[str, Resources], ...]  # (node, amount) kept for it by a preemption
    awaiting: tuple[str, ...]  # victims still stopping for it
    blocked_since: int | None
    started: tuple[str, ...] = ()  # nodes whose agent reported this attempt started
    retries: int = 0  # failed attempts started again (JobSubmitted.max_retries)
    waiting_for: tuple[str, ...] = ()  # after_ok jobs that have not succeeded yet
    timed_out: bool = False  # stopped for running its time_limit_s
    dependency_failed: str | None = None  # the after_ok job whose failure failed this one
    # (node, each placed task's device indices), then the same for tasks being stopped
    devices: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()
    stopping_devices: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()

    @property
    def placed_tasks(self) -> int:
        return sum(tasks for _, tasks in self.placements)


@dataclass(frozen=True, slots=True)
class QueueView:
    id: str
    parent: str | None
    children: tuple[str, ...]
    allocated: Resources  # own jobs
    subtree_allocated: Resources
    fair_share: tuple[float, float, float]  # whole subtree
    own_fair_share: tuple[float, float, float]
    stopped_by: str | None  # the job whose block stopped it in the last cycle


@dataclass(frozen=True, slots=True)
class NodeView:
    id: str
    lost: bool
    allocated: Resources
    free: Resources
    held: Resources
    stopping: Resources  # the part of `allocated` whose tasks are being stopped
    jobs: tuple[tuple[str, int], ...]  # (job, tasks placed or stopping)
    devices: tuple[int, ...] = ()  # the node's GPU device indices
    # (device, milli-GPU) of each device in use, then of the part being stopped, then held
    device_used: tuple[tuple[int, int], ...] = ()
    device_stopping: tuple[tuple[int, int], ...] = ()
    device_held: tuple[tuple[int, int], ...] = ()


def job_view(state: State, job_id: str) -> JobView | None:
    """The job as it stands; an ended job keeps only its final status."""
    job = state.jobs.get(job_id)
    if job is None:
        ended = state.ended_jobs.get(job_id)
        if ended is None:
            return None
        failed_dep = state.dependency_failed.get(job_id)
        return JobView(
            job_id, "", ended.value, 0, (), (), (), (), None, dependency_failed=failed_dep
        )
    return JobView(
        id=job.id,
        queue=job.queue,
        status=job.status.value,
        attempt=job.attempt,
        placements=tuple(sorted(job.placements.items())),
        stopping=tuple(sorted((node, stop.tasks) for node, stop in job.stopping.items())),
        held=tuple(sorted(job.held.items())),
        awaiting=tuple(sorted(job.awaiting)),
        blocked_since=job.blocked_since,
        started=tuple(sorted(job.started_nodes)),
        retries=job.retries,
        waiting_for=tuple(sorted(state.waiting.get(job.id, ()))),
        timed_out=job.timed_out,
        devices=tuple(sorted(job.devices.items())),
        stopping_devices=tuple(sorted((node, stop.devices) for node, stop in job.stopping.items())),
    )


def queue_view(state: State, queue_id: str) -> QueueView | None:
    queue = state.queues.get(queue_id)
    if queue is None:
        return None
    fairshare.refresh(state)
    return QueueView(
        id=queue.id,
        parent=queue.parent,
        children=tuple(sorted(queue.children)),
        allocated=queue.allocated,
        subtree_allocated=queue.subtree_allocated,
        fair_share=queue.fair_share,
        own_fair_share=queue.own_fair_share,
        stopped_by=queue.stopped_by,
    )


def node_view(state: State, node_id: str) -> NodeView | None:
    node = state.nodes.get(node_id)
    if node is None:
        return None
    return NodeView(
        id=node.id,
        lost=node.lost,
        allocated=node.allocated,
        free=node.free,
        held=node.held,
        stopping=node.stopping,
        jobs=tuple(sorted(node.jobs.items())),
        devices=tuple(node.gpus.layout.indices()),
        device_used=tuple(sorted(node.gpus.used.items())),
        device_stopping=tuple(sorted(node.gpus.stopping.items())),
        device_held=tuple(sorted(node.gpus.held.items())),
    )


def job_ids(state: State, status: JobStatus | None = None) -> list[str]:
    """Live job ids (sorted), optionally only those with one status."""
    return sorted(j for j, job in state.jobs.items() if status is None or job.status is status)
