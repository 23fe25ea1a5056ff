"""Scheduler state: queues, nodes, jobs and the indexes that keep a cycle cheap (pure).

The fold owns the state and mutates it in place for speed; every mutation goes through the
methods here so that aggregates (queue allocations, node free capacity, pending order) stay
consistent and can be undone exactly by a statement's rollback.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from domain.dependencies import forget_waiting, release_dependents
from domain.devices import Assignment, usage
from domain.entities import (
    NO_JOBS,
    TERMINAL,
    Job,
    JobStatus,
    Node,
    ShapeKeys,
    Stopping,
    hold_devices,
    place_on_devices,
)
from domain.events import ClusterConfigured
from domain.fairshare_level import LevelMemo
from domain.indexes import NodeIndex, PendingIndex
from domain.queues import Queue
from domain.resources import ZERO, Resources

__all__ = [
    "TERMINAL",
    "Job",
    "JobStatus",
    "Node",
    "NodeIndex",
    "PendingIndex",
    "Queue",
    "State",
    "Stopping",
]


@dataclass(slots=True)
class State:
    """Everything the scheduler knows, rebuilt by folding the journal from the start."""

    cluster: ClusterConfigured = field(default_factory=ClusterConfigured)
    queues: dict[str, Queue] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    ended_jobs: dict[str, JobStatus] = field(default_factory=dict)  # ids stay unique forever
    node_index: NodeIndex = field(default_factory=NodeIndex)
    capacity: Resources = ZERO  # sum over live nodes
    seq: int = 0  # last journal position folded
    ts: int = 0  # last journal stamp folded
    group_open: bool = False  # records folded since the last cycle
    needs_cycle: bool = False  # something changed that a cycle could act on
    fair_share_stale: bool = True
    # Incremental fair share: queues whose own demand or configuration changed since the last
    # recompute (their ancestors are implied); `fair_share_full` asks for a walk of every queue.
    fair_share_dirty: set[str] = field(default_factory=set)
    fair_share_full: bool = True
    # Levels of the tree last served in full, by parent (None: the top level): derived by
    # domain.fairshare, never written to a snapshot (a restored state shares every level anew).
    fair_share_levels: dict[str | None, LevelMemo] = field(default_factory=dict)
    # The recompute a cycle deferred to the first read of fair shares or the first change to
    # what they depend on (domain.decider); None outside a cycle.
    fair_share_due: Callable[[State], None] | None = None
    timers: list[tuple[int, str, str]] = field(default_factory=list)  # (due ts, kind, id) heap
    timer_set: set[tuple[int, str, str]] = field(default_factory=set)  # what `timers` holds
    freed: int = 0  # bumped whenever some node's free capacity may have grown (no-room memo)
    cancel_requests: set[str] = field(default_factory=set)  # running jobs to stop next cycle
    # Elastic jobs that have held resources; pruned lazily by the expand action, so keeping it
    # costs one set insert per placement instead of a scan of every running job each cycle.
    elastic_placed: set[str] = field(default_factory=set)
    holders: set[str] = field(default_factory=set)  # jobs with room held for them
    # Bumped by every change to what is held for pending jobs (a hold, a drop, a holder
    # pending again) and by a rollback that undid one: the fitter keeps its sums of promised
    # room while it stands still. A counter, never saved.
    hold_changes: int = field(default=0, compare=False)
    # Answers read from the configuration alone (the queue tree, its policies and preemption
    # settings, the cluster's settings), kept until it changes: evolve clears them on every
    # QueueConfigured, QueueDeleted and ClusterConfigured. Derived, never saved.
    configuration_memo: dict[object, object] = field(default_factory=dict, compare=False)
    configuration_changes: int = field(default=0, compare=False)  # bumped with that clearing
    # Consolidation plans that found nothing, per job shape, with the allocation stamp they
    # were made at (domain.actions.consolidate). Derived, never saved.
    failed_plans: dict[tuple[object, ...], tuple[int, int, int]] = field(
        default_factory=dict, compare=False
    )
    # Each job shape a cycle asked for, once (entities.ShapeKey, kept on the job); an entry
    # goes with the last live job holding it. Derived, never saved.
    shape_keys: ShapeKeys = field(default_factory=ShapeKeys, compare=False, repr=False)
    heartbeat_expiry: list[tuple[int, str]] = field(default_factory=list)  # lazy heap
    # Restarted agents' nodes -> the (job, attempt) pairs they run; settled by the next cycle.
    reconcile_requests: dict[str, frozenset[tuple[str, int]]] = field(default_factory=dict)
    # Dependencies (JobSubmitted.after_ok): job -> the jobs it still waits for, and the reverse.
    # A waiting job is live (state.jobs) but neither pending nor counted in its queue's demand.
    waiting: dict[str, set[str]] = field(default_factory=dict)
    dependents: dict[str, list[str]] = field(default_factory=dict)
    dependency_failed: dict[str, str] = field(default_factory=dict)  # job -> the job that failed

    # -- queues -----------------------------------------------------------------------

    def ancestors(self, queue_id: str) -> Iterator[Queue]:
        """The queue itself, then its parent, up to its top-level queue."""
        current: str | None = queue_id
        while current is not None:
            queue = self.queues[current]
            yield queue
            current = queue.parent

    def top_level_queues(self) -> tuple[str, ...]:
        memo = self.configuration_memo
        top = memo.get("top_level_queues")
        if top is None:
            top = memo["top_level_queues"] = tuple(
                sorted(q.id for q in self.queues.values() if q.parent is None)
            )
        return top  # type: ignore[return-value]

    def allocation_stamp(self) -> tuple[int, int, int]:
        """Equal while no node's room or jobs, no hold and no configuration changed: the node
        index's version (every change to a node ends in `NodeIndex.update`, and a statement's
        rollback restores it), the hold changes and the configuration changes. Read it only
        outside a statement's checkpoint: a tentative state's stamp is reused once rolled back."""
        return (self.node_index.version, self.hold_changes, self.configuration_changes)

    def configuration_changed(self) -> None:
        """Forgets what was derived from the configuration (evolve calls it)."""
        self.configuration_memo.clear()
        self.configuration_changes += 1

    # -- allocation: every change of who holds what goes through here ------------------
    # place / unplace, begin_stop / end_stop and hold / drop_holds are pairs; a statement
    # (domain.cycle.statement) undoes any of them exactly.

    def place(self, job: Job, node_id: str, tasks: int) -> tuple[Assignment, ...]:
        """Runs `tasks` more of the job on a node: its placements, the node, its devices and
        its queues. Returns the new tasks' devices (domain/devices.py)."""
        node = self.nodes[node_id]
        amount = job.per_task * tasks
        devices = place_on_devices(node, job, tasks)
        job.placements[node_id] = job.placements.get(node_id, 0) + tasks
        job.devices[node_id] = job.devices.get(node_id, ()) + devices
        node.jobs[job.id] = node.jobs.get(job.id, 0) + tasks
        node.allocated = node.allocated + amount
        self._charge_queues(job, amount)
        self.needs_cycle = True
        queue = self.queues[job.queue]
        queue.running.add(job.id)
        if job.min_tasks < job.tasks:
            self.elastic_placed.add(job.id)
        self.node_index.update(node)
        return devices

    def _take_placed(self, job: Job, node_id: str, tasks: int) -> tuple[Assignment, ...]:
        """Takes `tasks` of the job's placed tasks off its placements on a node: the latest
        placed first (a shrink frees the devices of the node's newest tasks)."""
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
        return stop

    def _count_stopping(self, job: Job, node_id: str, stop: Stopping, sign: int) -> None:
        amount = job.per_task * (sign * stop.tasks)
        node = self.nodes[node_id]
        node.stopping = node.stopping + amount
        node.gpus.add("stopping", usage(stop.devices, job.per_task.gpu), sign)
        queue = self.queues[job.queue]
        queue.stopping = queue.stopping + amount
        self.node_index.update(node)

    def unplace(self, job: Job, node_id: str, tasks: int) -> None:
        """Takes `tasks` of the job's placed tasks off a node and frees them: undoes `place`."""
        devices = self._take_placed(job, node_id, tasks)
        self.release(job, node_id, tasks, devices)

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

    # -- pending ------------------------------------------------------------------------

    def enqueue(self, job: Job) -> None:
        if job.held:
            self.hold_changes += 1  # held room now promised to a pending job
        job.status = JobStatus.PENDING
        job.finishing = False
        job.failed_on = None
        job.placements.clear()
        job.devices.clear()
        job.started_nodes = NO_JOBS
        job.started_ts = None
        self.queues[job.queue].pending.add(job)
        self.needs_cycle = True

    def dequeue(self, job: Job) -> None:
        self.queues[job.queue].pending.remove(job)
        job.blocked_since = None  # a later requeue starts a fresh blocked period
        job.pending_reason = None

    def update_fair_shares(self) -> None:
        """Runs the recompute the cycle deferred, if it has not yet: called before fair
        shares are read, or what they depend on changes, within a cycle."""
        due = self.fair_share_due
        if due is not None:
            self.fair_share_due = None
            due(self)

    def add_demand(self, job: Job) -> None:
        self.update_fair_shares()
        queue = self.queues[job.queue]
        queue.demand = queue.demand + job.request
        queue.jobs += 1
        self.fair_share_stale = True
        self.fair_share_dirty.add(queue.id)

    def end(self, job: Job, status: JobStatus) -> None:
        """The job is over: it leaves its queue's demand, its holds and the live job table."""
        self.update_fair_shares()
        queue = self.queues[job.queue]
        if job.id in self.waiting:
            forget_waiting(self, job.id)
        else:
            if job.status is JobStatus.PENDING:
                self.dequeue(job)
            queue.demand = queue.demand - job.request
        queue.jobs -= 1
        queue.running.discard(job.id)
        self.drop_holds(job)
        job.status = status
        del self.jobs[job.id]
        self.ended_jobs[job.id] = status
        self.fair_share_stale = True
        self.fair_share_dirty.add(queue.id)
        self.needs_cycle = True
        release_dependents(self, job.id, status)

    def fail(self, job: Job) -> None:
        """The job's attempt failed: started again while max_retries allows (a new attempt that
        keeps its place), else the job ends failed. A job stopped for its time limit or being
        cancelled is never retried."""
        retry = (
            not job.timed_out
            and job.status is not JobStatus.CANCELLING
            and job.retries < (job.spec.max_retries or 0)
        )
        if retry:
            job.retries += 1
            self.queues[job.queue].running.discard(job.id)
            self.enqueue(job)
        else:
            self.end(job, JobStatus.FAILED)

    def after_tasks_gone(self, job: Job) -> None:
        """Called when some of a job's tasks stopped; decides what becomes of the job."""
        if job.placements or job.stopping:
            return
        if job.status is JobStatus.CANCELLING:
            self.end(job, JobStatus.CANCELLED)
        elif job.timed_out or job.status is JobStatus.FAILED:
            self.fail(job)  # stopped for its time limit, or ended while older tasks stopped
        elif job.status is JobStatus.FINISHED:
            self.end(job, job.status)  # it ended while older tasks were still stopping
        elif job.status in (JobStatus.STOPPING, JobStatus.RUNNING):
            self.queues[job.queue].running.discard(job.id)
            self.enqueue(job)  # keeps its submission order, so its place in the queue

    # -- timers -------------------------------------------------------------------------

    def add_timer(self, due_ts: int, kind: str, ident: str) -> None:
        """Wakes a cycle at `due_ts`; asking again for the same wake-up adds nothing."""
        timer = (due_ts, kind, ident)
        if timer not in self.timer_set:
            self.timer_set.add(timer)
            heapq.heappush(self.timers, timer)

    def timers_due(self, now: int) -> bool:
        return bool(self.timers) and self.timers[0][0] <= now

    def pop_due_timers(self, now: int) -> list[tuple[int, str, str]]:
        due = []
        while self.timers and self.timers[0][0] <= now:
            timer = heapq.heappop(self.timers)
            self.timer_set.discard(timer)
            due.append(timer)
        return due
