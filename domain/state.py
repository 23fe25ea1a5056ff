"""Scheduler state: queues, nodes, jobs and the indexes that keep a cycle cheap (pure).

The fold owns the state and mutates it in place for speed; every mutation goes through the
methods here so that aggregates (queue allocations, node free capacity, pending order) stay
consistent and can be undone exactly by a statement's rollback.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from domain.allocation import Allocations
from domain.dependencies import forget_waiting, release_dependents
from domain.entities import (
    NO_JOBS,
    TERMINAL,
    Job,
    JobStatus,
    Node,
    ShapeKeys,
    Stopping,
)
from domain.events import ClusterConfigured
from domain.fairshare_level import LevelMemo
from domain.indexes import NodeIndex, PendingIndex
from domain.queues import Queue
from domain.quota import NO_LIMIT
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
class State(Allocations):
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
    # Holders all of whose awaited victims were still stopping when Claim last looked, and
    # the jobs whose stop on some node ended (or that ended) since: Claim looks again only at
    # the other holders and those awaiting one of these jobs (domain/actions/claim.py).
    # Derived, never saved: a loaded state has none checked, so Claim looks at every holder.
    awaiting_checked: set[str] = field(default_factory=set, compare=False)
    stops_ended: set[str] = field(default_factory=set, compare=False)
    # For Claim, who to look at again without walking every holder: the checked holders
    # awaiting each victim (an entry may name one that stopped awaiting it: looked at in
    # vain, never missed), and the jobs whose awaited victims were set since it looked.
    awaited_by: dict[str, set[str]] = field(default_factory=dict, compare=False)
    awaiting_set: set[str] = field(default_factory=set, compare=False)
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
    # So that a cycle visits only the queues with work, not every queue: those with a pending
    # job (kept by enqueue and dequeue), and those a cycle may have stopped (a superset of
    # the queues whose `stopped_by` or `stopped_policy` is set; Allocate clears both first).
    # Derived, never saved: built from the queues when a state is made (a snapshot's too).
    pending_queues: set[str] = field(default_factory=set, compare=False)
    stopped_queues: set[str] = field(default_factory=set, compare=False)

    def __post_init__(self) -> None:
        for queue in self.queues.values():
            if len(queue.pending):
                self.pending_queues.add(queue.id)
            if queue.stopped_by is not None or queue.stopped_policy is not None:
                self.stopped_queues.add(queue.id)

    # -- queues -----------------------------------------------------------------------

    def ancestors(self, queue_id: str) -> Iterator[Queue]:
        """The queue itself, then its parent, up to its top-level queue."""
        current: str | None = queue_id
        while current is not None:
            queue = self.queues[current]
            yield queue
            current = queue.parent

    def limited_path(self, queue_id: str) -> tuple[Queue, ...]:
        """The queues from this one up to its top level that are capped in some resource
        (most have no limit), kept until the configuration changes: limits come only from it."""
        key = ("limited_path", queue_id)
        path = self.configuration_memo.get(key)
        if path is None:
            path = self.configuration_memo[key] = tuple(
                queue for queue in self.ancestors(queue_id) if queue.quota.limit != NO_LIMIT
            )
        return path  # type: ignore[return-value]

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
        self.pending_queues.add(job.queue)
        self.needs_cycle = True

    def dequeue(self, job: Job) -> None:
        pending = self.queues[job.queue].pending
        pending.remove(job)
        if not len(pending):
            self.pending_queues.discard(job.queue)
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
        self.stop_ended(job.id)  # a victim that ends is no longer stopping
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
