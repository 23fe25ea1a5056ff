"""No room for a job's tasks: the shapes a cycle found none for, and the sentence and facts
of the capacity reason (pure).

Split from domain/cycle/fitting.py, which keeps both per shape while nothing changed.
"""

from __future__ import annotations

from domain.devices import WHOLE
from domain.entities import Selector
from domain.placement import largest_free
from domain.reasons import Reason, ReasonKind, reason
from domain.resources import Resources
from domain.state import Job, State


class NoRoomShapes:
    """Shapes (selector, per-task request, tasks) that found no room, valid while nothing was
    freed: free capacity only shrinks meanwhile, so any job with the same selector (or none)
    asking at least as much per task for at least as many tasks cannot fit. Each is kept
    with the node index's growths when it was found (`NodeIndex.growths`), for an answer
    that must not rest on the frees alone (`Fitter.finds_no_room`)."""

    def __init__(self) -> None:
        self._shapes: dict[Selector, list[tuple[Resources, int, int]]] = {}
        self._frees = -1  # the statement's frees they were found under

    def known(self, job: Job, tasks: int, frees: int) -> bool:
        """Whether a shape the job's covers found no room since the last free."""
        if self._frees != frees:
            self._shapes.clear()
            self._frees = frees
            return False
        return self._covered(job, tasks, None)

    def seen_since(self, job: Job, tasks: int, frees: int, growths: int) -> bool:
        """Whether one found none, by looking, with no node noted as grown since."""
        return self._frees == frees and self._covered(job, tasks, growths)

    def remember(self, job: Job, tasks: int, growths: int) -> None:
        shapes = self._shapes.setdefault(job.node_selector, [])
        # Keep only the smallest shapes: one that the new shape covers says nothing more.
        shapes[:] = [
            (per_task, failed_tasks, seen)
            for per_task, failed_tasks, seen in shapes
            if not (tasks <= failed_tasks and job.per_task.fits_in(per_task))
        ]
        shapes.append((job.per_task, tasks, growths))

    def _covered(self, job: Job, tasks: int, growths: int | None) -> bool:
        """Whether a shape the job's covers found none (at `growths`, if given)."""
        for selector in ((), job.node_selector) if job.node_selector else ((),):
            for per_task, failed_tasks, seen in self._shapes.get(selector, ()):
                found = failed_tasks <= tasks and per_task.fits_in(job.per_task)
                if found and (growths is None or seen == growths):
                    return True
        return False


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
