"""The cycle's statement: every change a cycle makes to State, undoable to a checkpoint (pure).

As KAI's statement: tentative placements and evictions are tried, checked, and rolled back
when they do not let a job run. A cycle has one statement; a rollback restores State
exactly as it was at the checkpoint (placement order, aggregates, `state.freed`, the node
index and its version, `needs_cycle`), so nothing downstream depends on every reader sorting.
Commands are emitted into the statement too and handed out by `commit` at the end of the
cycle; a rollback drops the commands emitted after its checkpoint.

Undo is recorded only while a checkpoint is open, so committed work costs nothing extra.
Operations that cannot be undone (a node lost, a job requeued or ended) refuse to run inside
a checkpoint: tentative work never does them.

Caches key on `epoch` (bumped by every change to who holds what on which node: placements,
stops, holds, lost nodes) and `frees` (bumped whenever free capacity may have grown), which
only grow, and a rollback bumps both: keying on `state.freed` or the node index version,
which a rollback restores, could revive what was derived from a tentative state. Setting a
job's or queue's fields and emitting commands change neither. `lasting` counts the changes
that outlive their call (made with no checkpoint open, or kept by accepting the outermost
one): what was derived from the state outside any checkpoint stays true while it is equal,
however much tentative work was tried and rolled back meanwhile.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from domain.commands import NodeCommand
from domain.cycle.memento import Undo, memento
from domain.cycle.parked import parked_if_kept
from domain.devices import Assignment
from domain.resources import Resources
from domain.state import Job, JobStatus, Queue, State

Touched = set[str]  # a queue's touched jobs (PendingIndex.touched); `set` is a method here
# Fields the cycle sets for the views and the queue policies' verdicts (why a job waits, since
# when, what stopped a queue): no fit, placement, rule or victim search reads them, so
# setting them is no lasting change.
VIEW_FIELDS = frozenset({"pending_reason", "blocked_since", "stopped_by", "stopped_policy"})


class Statement:
    def __init__(self, state: State) -> None:
        self._state = state
        self._undo: list[Undo] = []
        # (undo length, commands length, the state's hold changes, touched length) per checkpoint
        self._marks: list[tuple[int, int, int, int]] = []
        self._commands: list[NodeCommand] = []
        self._touched: list[Job] = []  # jobs changed under the open checkpoints (touch)
        self.epoch = 0  # bumped by every change to nodes' allocations and holds, and rollback
        self.frees = 0  # bumped whenever free capacity may have grown (and on every rollback)
        self.lasting = 0  # bumped by every change that is not tentative (see the docstring)

    # -- checkpoints ----------------------------------------------------------------------

    def checkpoint(self) -> int:
        """Opens a checkpoint: what follows can be rolled back to here."""
        self._marks.append(
            (len(self._undo), len(self._commands), self._state.hold_changes, len(self._touched))
        )
        return len(self._marks) - 1

    def rollback(self, checkpoint: int) -> None:
        """Undoes everything since `checkpoint` (and closes it and any inner one)."""
        self._open(checkpoint)
        undo_mark, command_mark, hold_changes, touched_mark = self._marks[checkpoint]
        while len(self._undo) > undo_mark:
            self._undo.pop()()
        if self._state.hold_changes != hold_changes:
            self._state.hold_changes += 1  # the holds are put back: a new version of them
        del self._commands[command_mark:]
        del self._touched[touched_mark:]
        del self._marks[checkpoint:]
        self.epoch += 1
        self.frees += 1

    def accept(self, checkpoint: int) -> None:
        """Keeps what was done since `checkpoint` (an enclosing checkpoint may still undo it)."""
        self._open(checkpoint)
        del self._marks[checkpoint:]
        if not self._marks:
            self._undo.clear()
            self.lasting += 1
            for job in self._touched:
                touched = self._touched_of(job)
                if touched is not None:
                    touched.add(job.id)
            self._touched.clear()

    def commit(self) -> list[NodeCommand]:
        """The cycle's commands, in the order they were emitted; the statement starts afresh."""
        if self._marks:
            raise RuntimeError("commit with a checkpoint still open")
        commands, self._commands = self._commands, []
        return commands

    @property
    def tentative(self) -> bool:
        """Whether a checkpoint is open: what is done now may still be rolled back."""
        return bool(self._marks)

    @property
    def emitted(self) -> int:
        """How many commands the cycle has emitted so far."""
        return len(self._commands)

    def emit(self, commands: Iterable[NodeCommand]) -> None:
        self._commands.extend(commands)
        if not self._marks:
            self.lasting += 1

    # -- undoable changes -----------------------------------------------------------------

    def place(
        self, job: Job, node_id: str, tasks: int, devices: tuple[Assignment, ...] | None = None
    ) -> tuple[Assignment, ...]:
        """Places the tasks (on `devices`, if given: see State.place); returns their devices."""
        self._record(job, (node_id,))
        placed = self._state.place(job, node_id, tasks, devices)
        self.epoch += 1
        return placed

    def unplace(self, job: Job, node_id: str, tasks: int) -> tuple[Assignment, ...]:
        """Takes the tasks off the node; returns the devices they used."""
        self._record(job, (node_id,))
        devices = self._state.unplace(job, node_id, tasks)
        self._freed()
        return devices

    def begin_stop(self, job: Job, node_id: str, tasks: int, requeue: bool) -> None:
        self._record(job, (node_id,))
        self._state.begin_stop(job, node_id, tasks, requeue)
        self.epoch += 1

    def hold(self, job: Job, node_id: str, amount: Resources) -> None:
        self._record(job, (node_id,))
        self._state.hold(job, node_id, amount)
        self.epoch += 1

    def drop_holds(self, job: Job) -> None:
        held = bool(job.held)
        self._record(job, sorted(job.held))
        self._state.drop_holds(job)
        if held:
            self._freed()

    def set(self, target: object, name: str, value: object) -> None:
        """Sets one field of a job or queue (status, attempt, awaiting, reasons, ...). A value
        equal to the field's is no lasting change: a preemptor still waiting for the same
        victims, retried every cycle, must not void what the cycle derived."""
        old = getattr(target, name)
        if old is not value and type(target) is Job:
            self.touch(target)
            if name == "awaiting":
                self._state.awaiting_changed(target.id)  # for Claim (domain/actions/claim.py)
        if self._marks:
            self._undo.append(lambda: setattr(target, name, old))
        elif name not in VIEW_FIELDS and old != value:
            self.lasting += 1
        setattr(target, name, value)

    def set_view(self, queue: Queue, jobs: Iterable[Job], name: str, value: object) -> None:
        """`set` of a view field on many jobs of `queue` (look-alikes given their reason).
        Outside a checkpoint, with no walk of the queue kept to touch, `set` is a plain
        assignment (no lasting change), and this loop is just that."""
        if name not in VIEW_FIELDS:
            raise ValueError(f"{name} is not a view field")
        touched = queue.pending.touched
        if self._marks or touched is not None:
            for job in jobs:
                self.set(job, name, value)
            return
        for job in jobs:
            setattr(job, name, value)

    def touch(self, job: Job) -> None:
        """Notes that the job changed, for its queue's settled walk (domain/actions/
        settled_walk.py): noted among its queue's touched jobs if it is pending (any other
        job changes the walk only by joining the list, which is noted apart); under a
        checkpoint, only once the change is kept (rolled back, it is undone)."""
        if job.status is not JobStatus.PENDING:
            return  # it joins the pending list, which is a change of its own
        parked = parked_if_kept(self._state)
        if parked is not None:  # a waiting preemptor that changed is asked in full again
            parked.unpark(job.id)
        touched = self._touched_of(job)
        if touched is None:
            return  # no settled walk of its queue to void (one is kept only between walks)
        if self._marks:
            self._touched.append(job)
        else:
            touched.add(job.id)

    def _touched_of(self, job: Job) -> Touched | None:
        """The touched jobs of the job's queue, while its settled walk is kept."""
        queue = self._state.queues.get(job.queue)
        return None if queue is None else queue.pending.touched

    # -- changes that are never tentative -------------------------------------------------

    def release(self, job: Job, node_id: str, tasks: int, devices: tuple[Assignment, ...]) -> None:
        self._final()
        self._state.release(job, node_id, tasks, devices)
        self._freed()

    def lose_tasks(self, job: Job, node_id: str, placed: bool, stopping: bool) -> int:
        self._final()
        lost = self._state.lose_tasks(job, node_id, placed, stopping)
        if lost:
            self._freed()
        return lost

    def after_tasks_gone(self, job: Job) -> None:
        self._final()
        self._state.after_tasks_gone(job)
        self._freed()

    def dequeue(self, job: Job) -> None:
        self._final()
        self._state.dequeue(job)

    def lose_node(self, node_id: str) -> None:
        """The node is gone: its capacity leaves the cluster (its tasks were released)."""
        self._final()
        state = self._state
        state.update_fair_shares()
        node = state.nodes[node_id]
        node.lost = True
        state.capacity = state.capacity - node.capacity
        state.node_index.discard(node_id)
        state.fair_share_stale = True
        self.epoch += 1

    def add_timer(self, due_ts: int, kind: str, ident: str) -> None:
        self._state.add_timer(due_ts, kind, ident)  # a wake-up only: keeping it is harmless

    def pop_due_timers(self, now: int) -> None:
        self._final()
        self._state.pop_due_timers(now)

    def pop_heartbeat_expiry(self, now: int) -> list[str]:
        """The nodes whose heartbeat deadline (as last pushed) is due, in deadline order."""
        self._final()
        expiry = self._state.heartbeat_expiry
        due = []
        while expiry and expiry[0][0] <= now:
            due.append(heapq.heappop(expiry)[1])
        return due

    def forget_elastic(self, job_id: str) -> None:
        """Prunes a job that no longer runs from the elastic jobs the expand action visits."""
        self._final()
        self._state.elastic_placed.discard(job_id)

    # -- undo -----------------------------------------------------------------------------

    def _freed(self) -> None:
        self.epoch += 1
        self.frees += 1

    def _open(self, checkpoint: int) -> None:
        if not 0 <= checkpoint < len(self._marks):
            raise RuntimeError(f"checkpoint {checkpoint} is not open")

    def _final(self) -> None:
        if self._marks:
            raise RuntimeError("not undoable, so never done inside a checkpoint")
        self.lasting += 1

    def _record(self, job: Job, node_ids: Iterable[str]) -> None:
        """Remembers everything a change to the job on these nodes may touch."""
        self.touch(job)
        if self._marks:
            self._undo.append(memento(self._state, job, node_ids))
        else:
            self.lasting += 1
