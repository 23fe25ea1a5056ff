"""Expand action (Run:AI elasticity): a shrunk elastic job doubles while spare capacity allows (pure).

Runs after Allocate, so it only ever uses what allocation left: a running elastic job below
its full size grows to min(tasks, 2 x placed), again and again, as long as the growth passes
quota and limit checks (counting the headroom promised to preemptors, as any fit does),
finds nodes, and leaves enough free capacity for the smallest size of
every job still pending in a queue at least as deprived as the expanding job's own queue
(those would be served before it by Allocate). Dispatch reason `expand`, same attempt.
"""

from __future__ import annotations

from domain.cycle.framework import Cycle
from domain.cycle.ordering import QueueKey, queue_key
from domain.indexes import DemandShape, demand_shape
from domain.placement import find_placement
from domain.quota_checks import shape_admission_breach
from domain.resources import ZERO, Resources
from domain.state import Job, JobStatus, State


def growable(job: Job) -> bool:
    return (
        job.status is JobStatus.RUNNING
        and not job.finishing
        and not job.stopping
        and bool(job.placements)
        and job.placed_tasks < job.tasks
    )


def free_capacity(state: State) -> Resources:
    return state.node_index.free_total


class Expand:
    name = "expand"

    def execute(self, cycle: Cycle) -> None:
        state = cycle.state
        candidates: list[Job] = []
        for job_id in sorted(state.elastic_placed):
            job = state.jobs.get(job_id)
            if job is None or not job.placements:
                cycle.statement.forget_elastic(job_id)  # ended or back to pending
            elif growable(job):
                candidates.append(job)
        if not candidates:
            return
        waiting = self._waiting(cycle)
        free = free_capacity(state)
        candidates.sort(key=lambda job: (queue_key(cycle.state, job.queue), job.order, job.id))
        for job in candidates:
            reserve = ZERO
            key = queue_key(cycle.state, job.queue)
            for other_key, need in waiting:
                if other_key <= key:
                    reserve = reserve + need
            while job.placed_tasks < job.tasks:
                placed = job.placed_tasks
                extra = min(job.tasks, 2 * placed) - placed
                amount = job.per_task * extra
                if not (amount + reserve).fits_in(free):
                    break
                if cycle.breach(job, extra) is not None:
                    break  # quota, a limit, or headroom promised to a preemptor
                plan = find_placement(state, job, extra, cycle.placement())
                if plan is None:
                    break
                cycle.dispatch(job, plan, reason="expand")
                free = free - amount

    def _waiting(self, cycle: Cycle) -> list[tuple[QueueKey, Resources]]:
        """(queue key, smallest request) of each job still pending that could use capacity:
        not waiting on held room, not kept out by its own quota or limit. Summed per shape
        of what the queue's pending jobs ask (`PendingIndex.demand`), less the jobs holding
        room, so it costs the queues and shapes pending, not the jobs."""
        state = cycle.state
        held = _held_pending(state)
        waiting: list[tuple[QueueKey, Resources]] = []
        for queue_id in sorted(state.pending_queues):
            queue = state.queues[queue_id]
            key = queue_key(cycle.state, queue_id)
            holding = held.get(queue_id, {})
            need = ZERO
            for shape, count in sorted(queue.pending.demand.items()):
                count -= holding.get(shape, 0)
                if not count:
                    continue
                gpu, cpu, memory, min_tasks, preemptible, interactive = shape
                amount = Resources(gpu, cpu, memory) * min_tasks
                breach = shape_admission_breach(state, queue_id, amount, preemptible, interactive)
                if breach is not None:
                    continue
                need = need + amount * count
            if not need.is_zero():
                waiting.append((key, need))
        return waiting


def _held_pending(state: State) -> dict[str, dict[DemandShape, int]]:
    """Per queue, how many of its pending jobs of each shape hold room."""
    held: dict[str, dict[DemandShape, int]] = {}
    for job_id in sorted(state.holders):
        job = state.jobs.get(job_id)
        if job is None or not job.held or job not in state.queues[job.queue].pending:
            continue
        shapes = held.setdefault(job.queue, {})
        shape = demand_shape(job)
        shapes[shape] = shapes.get(shape, 0) + 1
    return held
