"""The sentence and facts of a capacity reason: why no node takes a job's tasks (pure).

Split from domain/cycle/fitting.py, which keeps one per shape while nothing changed.
"""

from __future__ import annotations

from domain.devices import WHOLE
from domain.placement import largest_free
from domain.reasons import Reason, ReasonKind, reason
from domain.state import Job, State


def no_room_reason(state: State, job: Job, tasks: int) -> Reason:
    """Why no node takes `tasks` of the job: no live nodes, a task larger than the cluster,
    or no room, with the most free node and the nodes whose free GPUs only fractional tasks
    may share."""
    largest = largest_free(state)
    if largest is None:
        return reason(ReasonKind.CAPACITY, "no live nodes", tasks=tasks)
    if not job.per_task.fits_in(state.capacity):
        return reason(
            ReasonKind.CAPACITY,
            f"one task ({job.per_task}) is larger than the whole cluster",
            tasks=tasks,
            per_task=str(job.per_task),
        )
    selector = ""
    if job.node_selector:
        selector = " matching " + ",".join(f"{k}={v}" for k, v in job.node_selector)
    found = reason(
        ReasonKind.CAPACITY,
        f"no room on nodes{selector} for {tasks} task(s) of {job.per_task} (most free node: {largest})",
        tasks=tasks,
        per_task=str(job.per_task),
        most_free=str(largest),
        selector=selector.removeprefix(" matching "),
    )
    shared = _shared_devices_only(state, job)
    if not shared:
        return found
    return found.prefixed(
        "",
        f"; {shared} node(s) have the GPUs free only on devices that fractional tasks "
        "share, and a whole-GPU task takes whole free devices",
        shared_devices_only=shared,
    )


def _shared_devices_only(state: State, job: Job) -> int:
    """How many nodes (of the first 64 with enough free GPU in total) would hold one task
    of the job by their totals but not on their devices."""
    if job.per_task.gpu < WHOLE:
        return 0
    count = 0
    for looked, node_id in enumerate(state.node_index.fullest_first(job.per_task.gpu)):
        if looked >= 64:
            break
        node = state.nodes[node_id]
        if node.matches(job.node_selector) and job.per_task.max_copies_in(node.free):
            count += node.copies(job.per_task) == 0
    return count
