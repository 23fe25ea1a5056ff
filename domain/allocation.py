"""Allocation: every change of who holds what on which node, as methods of State (pure).

Split from domain/state.py, whose State inherits them: place / unplace, begin_stop /
end_stop and hold / drop_holds are pairs, and a statement (domain.cycle.statement) undoes
any of them exactly. Each keeps the aggregates consistent: the job's placements and devices,
the node's allocation and devices, its queues' allocations, the node index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from domain.devices import Assignment, usage
from domain.entities import Job, Node, Stopping, hold_devices, place_on_devices
from domain.indexes import NodeIndex
from domain.queues import Queue
from domain.resources import ZERO, Resources

__all__ = ["Allocations"]

_NONE_YET = 1 << 62  # Allocations.least_task, no job counted yet: above any request
STOPS_ENDED_MAX = 4096  # stops ended that Allocations.stop_ended keeps for Claim


class Allocations:
    """The allocation methods of State; the fields they use are State's."""

    if not TYPE_CHECKING:
        # State is a slots dataclass: its mixin adds no instance dict. Hidden from mypy,
        # which would otherwise take these declarations for the only attributes allowed.
        __slots__ = ()

    nodes: dict[str, Node]
    queues: dict[str, Queue]
    jobs: dict[str, Job]
    node_index: NodeIndex
    holders: set[str]
    awaiting_checked: set[str]
    stops_ended: set[str]
    awaited_by: dict[str, set[str]]
    awaiting_set: set[str]
    elastic_placed: set[str]
    hold_changes: int
    freed: int
    needs_cycle: bool

    if TYPE_CHECKING:

        def ancestors(self, queue_id: str) -> Iterator[Queue]: ...

    def place(
        self, job: Job, node_id: str, tasks: int, devices: tuple[Assignment, ...] | None = None
    ) -> tuple[Assignment, ...]:
        """Runs `tasks` more of the job on a node: its placements, the node, its devices and
        its queues. Returns the new tasks' devices (domain/devices.py): chosen here, or
        `devices`, those `unplace` returned, to put tasks back exactly where they were."""
        node = self.nodes[node_id]
        amount = job.per_task * tasks
        if devices is None:
            devices = place_on_devices(node, job, tasks)
        else:
            node.gpus.add("used", usage(devices, job.per_task.gpu))
        job.placements[node_id] = job.placements.get(node_id, 0) + tasks
        job.devices[node_id] = job.devices.get(node_id, ()) + devices
        node.jobs[job.id] = node.jobs.get(job.id, 0) + tasks
        node.allocated = node.allocated + amount
        self._charge_queues(job, amount)
        self.needs_cycle = True
        queue = self.queues[job.queue]
        stoppable_on = queue.stoppable_on
        if stoppable_on is not None and job.preemptible and not job.interactive:
            # (unknown stays unknown: stoppable_on counts every job then)
            stoppable_on[node_id] = stoppable_on.get(node_id, ZERO) + amount
        queue.running.add(job.id)
        least = queue.least_task
        if least is not None:  # unknown stays unknown: least_task counts every job then
            asked = job.per_task
            if asked.gpu < least.gpu or asked.cpu < least.cpu or asked.memory < least.memory:
                queue.least_task = Resources(
                    min(asked.gpu, least.gpu),
                    min(asked.cpu, least.cpu),
                    min(asked.memory, least.memory),
                )
        if job.min_tasks < job.tasks:
            self.elastic_placed.add(job.id)
        self.node_index.update(node)
        return devices

    def least_task(self, queue_id: str) -> Resources:
        """Per resource, at most the per-task request of any job running in the queue
        (`Queue.least_task`). A victim releases at least one task (one with none placed is
        no victim), so when this is above what the queue may release in some resource, so
        is every victim's first step, and the victim search need not list the queue's jobs.
        `place` lowers it, nothing raises it; where not known yet (a queue new or restored
        from a snapshot) it is counted from every live job, once for all such queues: a
        job's tasks run only through `place`, so every job running later is counted."""
        known = self.queues[queue_id].least_task
        if known is not None:
            return known
        unknown = [queue for queue in self.queues.values() if queue.least_task is None]
        least = {queue.id: [_NONE_YET, _NONE_YET, _NONE_YET] for queue in unknown}
        for job in self.jobs.values():
            amounts = least.get(job.queue)
            if amounts is not None:
                asked = job.per_task
                amounts[0] = min(amounts[0], asked.gpu)
                amounts[1] = min(amounts[1], asked.cpu)
                amounts[2] = min(amounts[2], asked.memory)
        for queue in unknown:
            queue.least_task = Resources(*least[queue.id])
        found = self.queues[queue_id].least_task
        assert found is not None
        return found

    def stoppable_on(self, queue_id: str) -> dict[str, Resources]:
        """Per node, what the queue's preemptible, non-interactive jobs have placed there
        (`Queue.stoppable_on`; not to be changed by the caller). Where not known yet (a queue
        new or restored from a snapshot) it is counted from every job's placements, once
        for all such queues."""
        known = self.queues[queue_id].stoppable_on
        if known is not None:
            return known
        unknown = {queue.id: queue for queue in self.queues.values() if queue.stoppable_on is None}
        counted: dict[str, dict[str, Resources]] = {queue_id: {} for queue_id in unknown}
        for job in self.jobs.values():
            per_node = counted.get(job.queue)
            if per_node is not None and job.preemptible and not job.interactive:
                for node_id, tasks in job.placements.items():
                    per_node[node_id] = per_node.get(node_id, ZERO) + job.per_task * tasks
        for queue in unknown.values():
            queue.stoppable_on = counted[queue.id]
        return counted[queue_id]

    def take_placed(self, job: Job, node_id: str) -> tuple[int, tuple[Assignment, ...]]:
        """Takes all of the job's placed tasks off a node (they finished): how many, and
        their devices. Not freed yet (`release`)."""
        tasks = job.placements.get(node_id, 0)
        devices = job.devices.pop(node_id, ())
        job.placements.pop(node_id, None)
        self._unplaced(job, node_id, tasks)
        return tasks, devices

    def _unplaced(self, job: Job, node_id: str, tasks: int) -> None:
        stoppable_on = self.queues[job.queue].stoppable_on
        if stoppable_on is not None and tasks and job.preemptible and not job.interactive:
            left = stoppable_on.get(node_id, ZERO) - job.per_task * tasks
            if left.is_zero():
                stoppable_on.pop(node_id, None)
            else:
                stoppable_on[node_id] = left

    def _take_placed(self, job: Job, node_id: str, tasks: int) -> tuple[Assignment, ...]:
        """Takes `tasks` of the job's placed tasks off its placements on a node: the latest
        placed first (a shrink frees the devices of the node's newest tasks)."""
        self._unplaced(job, node_id, min(tasks, job.placements.get(node_id, 0)))
        left = job.placements.get(node_id, 0) - tasks
        devices = job.devices.get(node_id, ())
        cut = max(0, len(devices) - tasks)
        if left > 0:
            job.placements[node_id] = left
            job.devices[node_id] = devices[:cut]
        else:
            job.placements.pop(node_id, None)
            job.devices.pop(node_id, None)
        return devices[cut:]

    def begin_stop(self, job: Job, node_id: str, tasks: int, requeue: bool) -> None:
        """Moves `tasks` of the job's placed tasks on a node to stopping (still allocated)."""
        devices = self._take_placed(job, node_id, tasks)
        earlier = job.stopping.get(node_id)
        if earlier is not None:
            # A second stop on the same node before the first is acknowledged: one entry, so
            # the tasks are released together when the agent reports (never lost track of).
            tasks += earlier.tasks
            requeue = requeue and earlier.requeue
            self._count_stopping(job, node_id, earlier, -1)
            devices = earlier.devices + devices
        stop = Stopping(job.attempt, tasks, requeue, devices)
        job.stopping[node_id] = stop
        self._count_stopping(job, node_id, stop, 1)

    def end_stop(self, job: Job, node_id: str) -> Stopping | None:
        """The job's stopping tasks on a node are gone from the stopping set (not yet released)."""
        stop = job.stopping.pop(node_id, None)
        if stop is not None:
            self._count_stopping(job, node_id, stop, -1)
            self.stop_ended(job.id)
        return stop

    def stop_ended(self, job_id: str) -> None:
        """Notes, for Claim, that a job may have stopped being a victim that stops."""
        if len(self.stops_ended) >= STOPS_ENDED_MAX:
            # Claim has not looked for a long while (or is not among the actions): it will
            # look at every holder again instead.
            self.awaiting_checked.clear()
            self.stops_ended.clear()
            self.awaited_by.clear()
        self.stops_ended.add(job_id)

    def awaiting_changed(self, job_id: str) -> None:
        """Notes, for Claim, that a job's awaited victims were set: it looks at it again.
        A full set stays as it is and has Claim look at every holder (a set that Claim
        does not empty, when it is not among the actions, stays bounded)."""
        if len(self.awaiting_set) < STOPS_ENDED_MAX:
            self.awaiting_set.add(job_id)

    def _count_stopping(self, job: Job, node_id: str, stop: Stopping, sign: int) -> None:
        amount = job.per_task * (sign * stop.tasks)
        node = self.nodes[node_id]
        node.stopping = node.stopping + amount
        node.gpus.add("stopping", usage(stop.devices, job.per_task.gpu), sign)
        queue = self.queues[job.queue]
        queue.stopping = queue.stopping + amount
        self.node_index.update(node)

    def unplace(self, job: Job, node_id: str, tasks: int) -> tuple[Assignment, ...]:
        """Takes `tasks` of the job's placed tasks off a node and frees them: undoes `place`.
        Returns the devices they used."""
        devices = self._take_placed(job, node_id, tasks)
        self.release(job, node_id, tasks, devices)
        return devices

    def release(self, job: Job, node_id: str, tasks: int, devices: tuple[Assignment, ...]) -> None:
        """Frees `tasks` of the job's on a node that are no longer placed (they finished or
        were stopped, or their node was lost), and the devices they used."""
        node = self.nodes[node_id]
        amount = job.per_task * tasks
        left = node.jobs.get(job.id, 0) - tasks
        if left > 0:
            node.jobs[job.id] = left
        else:
            node.jobs.pop(job.id, None)
        node.allocated = node.allocated - amount
        node.gpus.add("used", usage(devices, job.per_task.gpu), -1)
        self.freed += 1
        self._charge_queues(job, ZERO - amount)
        if job.allocation.is_zero() or (not job.placements and not job.stopping):
            self.queues[job.queue].running.discard(job.id)
        self.node_index.update(node)
        self.needs_cycle = True

    def lose_tasks(self, job: Job, node_id: str, placed: bool, stopping: bool) -> int:
        """The job's tasks on a node (placed, being stopped, or both) are gone, with the node
        or with a restarted agent: frees them and returns how many there were."""
        tasks = job.placements.get(node_id, 0) if placed else 0
        devices = self._take_placed(job, node_id, tasks) if tasks else ()
        stop = self.end_stop(job, node_id) if stopping else None
        if stop is not None:
            devices += stop.devices
        lost = tasks + (stop.tasks if stop else 0)
        if lost:
            self.release(job, node_id, lost, devices)
        return lost

    def _charge_queues(self, job: Job, amount: Resources) -> None:
        first = True
        for queue in self.ancestors(job.queue):
            if first:
                queue.allocated = queue.allocated + amount
                if not job.preemptible:
                    queue.protected = queue.protected + amount
                first = False
            queue.subtree_allocated = queue.subtree_allocated + amount

    def hold(self, job: Job, node_id: str, amount: Resources) -> None:
        """Keeps `amount` on a node for `job` (freed for it by a preemption), and the devices
        its tasks will take there once the stopping tasks are gone."""
        node = self.nodes[node_id]
        self.hold_changes += 1
        job.held[node_id] = job.held.get(node_id, ZERO) + amount
        node.held = node.held + amount
        devices = hold_devices(node, job, amount)
        if devices:
            own = job.held_devices.get(node_id, {})
            job.held_devices[node_id] = {
                index: own.get(index, 0) + devices.get(index, 0)
                for index in sorted(set(own) | set(devices))
            }
            node.gpus.add("held", devices)
        queue = self.queues[job.queue]
        queue.held = queue.held + amount
        self.holders.add(job.id)
        self.node_index.update(node)

    def drop_holds(self, job: Job) -> None:
        if not job.held and job.id not in self.holders:
            return  # it holds nothing (every dispatch drops holds first): no hold changes
        self.hold_changes += 1
        self.holders.discard(job.id)
        if job.held:
            self.freed += 1
            queue = self.queues[job.queue]
            for amount in job.held.values():
                queue.held = queue.held - amount
        for node_id in sorted(job.held):
            node = self.nodes.get(node_id)
            if node is not None:
                node.held = (node.held - job.held[node_id]).clamp_at_zero()
                node.gpus.add("held", job.held_devices.get(node_id, {}), -1)
                self.node_index.update(node)
        job.held.clear()
        job.held_devices.clear()
