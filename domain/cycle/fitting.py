"""Fitting: whether some tasks of a job may run now and on which nodes, or why not (pure).

Checks quota and limits, then asks the placement strategy for nodes; changes nothing.
Per-cycle caches keep a round-robin scan over a full cluster cheap without changing any
decision: quota and limit verdicts per queue and request, shapes known to find no room, and
the reason sentence per shape.
"""

from __future__ import annotations

from collections.abc import Callable

from domain.cycle.framework import Attempt, Outcome
from domain.cycle.no_room import NoRoomShapes, no_room_reason
from domain.entities import Selector
from domain.placement import PlacementStrategy, copies_held_for, find_placement
from domain.quota_checks import admission_breach, protected_breach
from domain.reasons import Reason, ReasonKind, reason
from domain.resources import ZERO, Resources
from domain.state import Job, JobStatus, State

# Held room per queue: over each queue's subtree, and over its own non-preemptible jobs.
Promised = tuple[dict[str, Resources], dict[str, Resources]]
# Queue, per-task request (gpu, cpu, memory), tasks, kind: plain values, which hash and
# compare without a Python call (a `Resources` hashes with one).
BreachKey = tuple[str, tuple[int, int, int], int, bool, bool]


class Fitter:
    """Fits jobs for one cycle; `changes()` is (epoch, frees) of the cycle's statement."""

    def __init__(
        self,
        state: State,
        placement: Callable[[], PlacementStrategy],
        changes: Callable[[], tuple[int, int]],
    ) -> None:
        self._state = state
        self._placement = placement
        self._changes = changes
        self._no_room = NoRoomShapes()  # shapes that found no room since the last free
        self._looked: tuple[tuple[int, int], str, int] | None = None  # the last search in vain
        # The same reason for the same shape while nothing changed.
        self._reasons: dict[tuple[Selector, Resources, int], tuple[int, Reason]] = {}
        # Room held for pending preemptors, summed per queue (see `_promised`).
        self._promised_key: int | None = None
        self._promised_all: Promised | None = None
        # Quota, limit and promised-room verdicts per queue, request and kind (`_breach`).
        self._breaches: dict[BreachKey, Reason | None] = {}
        self._admissions: dict[BreachKey, Reason | None] = {}  # quota and limits alone
        # For a pending holder, per the same and the room it holds itself.
        self._holder_breaches: dict[tuple[BreachKey, tuple[int, int, int]], Reason | None] = {}
        self._breaches_at: tuple[int, int, int] | None = None

    def sizes(self, job: Job) -> list[int]:
        """Full size first; an elastic job then halves again and again down to min_tasks."""
        sizes = [job.tasks]
        while sizes[-1] > job.min_tasks:
            sizes.append(max(job.min_tasks, sizes[-1] // 2))
        return sizes

    def fit(self, job: Job, tasks: int) -> Attempt:
        """Checks quota and limits, then finds nodes, for `tasks` of the job; changes nothing."""
        breach = self.breach(job, tasks)
        if breach is not None:
            return Attempt(reason=breach)
        # What is held for a job widens its room, unless no node it holds room on could take
        # one of its tasks yet (its victims still stopping): then find_placement places it
        # exactly as a job of its shape holding nothing, and the shape's memo applies.
        general = not job.held or not _held_room_now(self._state, job)
        if general and self._no_room.known(job, tasks, self._changes()[1]):
            return Attempt(reason=self._capacity_reason(job, tasks))
        plan = find_placement(self._state, job, tasks, self._placement())
        if plan is None:
            if general:
                self._no_room.remember(job, tasks, self._state.node_index.growths)
            self._looked = (self._changes(), job.id, tasks)
            return Attempt(reason=self._capacity_reason(job, tasks))
        return Attempt(plan=plan, tasks=tasks)

    def finds_no_room(self, job: Job, held_take_none: bool = False) -> bool:
        """Whether no size of the job is placeable now, found by looking: the memo of shapes
        is trusted only where no node's room grew since its shape found none (frees may miss
        a growth, `NodeIndex.update` does not), and a size just looked for in vain with
        nothing changed since is not looked for again. `held_take_none`: the nodes it holds
        room on are known to take none of its tasks. Asked once per preemptor parked."""
        changes, growths = self._changes(), self._state.node_index.growths
        for tasks in self.sizes(job) if job.min_tasks < job.tasks else (job.tasks,):
            if self._looked == (changes, job.id, tasks) or (
                held_take_none and self._no_room.seen_since(job, tasks, changes[1], growths)
            ):
                continue
            held = frozenset(job.held) if held_take_none else frozenset()
            if find_placement(self._state, job, tasks, self._placement(), held) is not None:
                return False
        return True

    def waits_for_room(self, job: Job) -> bool:
        """Whether `fit` would find no size of the job placeable from what it knows already:
        no quota, limit or promised-room breach, no node the job holds room on that could take
        a task yet, and its shape known to find no room. False where `fit` would have to look."""
        if job.held and _held_room_now(self._state, job):
            return False
        tasks = job.tasks
        for size in self.sizes(job) if job.min_tasks < tasks else (tasks,):
            if self.breach(job, size) is not None or not self._no_room.known(
                job, size, self._changes()[1]
            ):
                return False
        return True

    def breach(self, job: Job, tasks: int) -> Reason | None:
        """Why quota, limits or room promised to preemptors forbid `tasks` more of the job.

        Both checks read of the job only its queue, request and kind (preemptible,
        interactive), unless it holds room itself; so the verdict is kept per those while no
        allocation, hold or stop changed, and look-alike jobs that differ in priority, say,
        cost one check. A pending job holding room shares the quota and limit verdict, and
        the promised-room verdict with those holding as much as it does (less its own room,
        the sums are the same). A preemptible job under no limit can breach neither: that is
        known from the configuration alone, before any key is made."""
        if job.preemptible and not self._state.limited_path(job.queue):
            return None
        now = self._allocations()
        if now != self._breaches_at:
            self._breaches_at = now
            self._breaches.clear()
            self._holder_breaches.clear()
            self._admissions.clear()
        key = (job.queue, job.per_task.as_tuple(), tasks, job.preemptible, job.interactive)
        if job.id in self._state.holders:
            mine = _own_held(self._state, job)
            held_key = (key, mine.as_tuple())
            if held_key not in self._holder_breaches:
                self._holder_breaches[held_key] = self._admission(
                    key, job, tasks
                ) or self._reserved_breach(job, tasks, mine)
            return self._holder_breaches[held_key]
        if key not in self._breaches:
            self._breaches[key] = self._admission(key, job, tasks) or self._reserved_breach(
                job, tasks, ZERO
            )
        return self._breaches[key]

    def _admission(self, key: BreachKey, job: Job, tasks: int) -> Reason | None:
        if key not in self._admissions:
            self._admissions[key] = admission_breach(self._state, job, tasks)
        return self._admissions[key]

    def _allocations(self) -> tuple[int, int, int]:
        """What the verdicts on quota, limits and promised room are kept under: the
        statement's epoch and frees, and how many jobs hold room."""
        epoch, frees = self._changes()
        return epoch, frees, len(self._state.holders)

    def _reserved_breach(self, job: Job, tasks: int, mine: Resources) -> Reason | None:
        """Why `tasks` of the job would use quota or limit headroom that a preemption already
        promised to another job, or None.

        Held room keeps node capacity for a preemptor, but the preemptor must also still pass
        its quota and limit checks once its victims stop; without this, a job of the same
        queue placed meanwhile could use that headroom and leave the held room idle.
        `mine` is what is held for the job itself while it is a pending holder (`_own_held`):
        no promise to another, so it is taken out of the sums."""
        state = self._state
        # Only a limit on the way up, or a non-preemptible job's quota, can be breached by
        # room held for others (most queues have no limit). `_breach` asks nothing of a
        # preemptible job under no limit, so for it the promised sums are never made,
        # however often holds change.
        limited = state.limited_path(job.queue)
        promised_to = self._promised()
        if promised_to is None:
            return None
        subtree, own_non_preemptible = promised_to
        # Amounts are exact integers, so taking `mine` away gives what summing the other
        # holders gives, and a holder that is the only one is checked as if nothing were
        # held (zero sums are skipped).
        amount = job.per_task * tasks
        for queue in limited:
            promised = subtree.get(queue.id, ZERO)
            if mine is not ZERO:
                promised = promised - mine
            if promised.is_zero():
                continue
            breach = queue.quota.limit_breach(queue.subtree_allocated + amount + promised)
            if breach is not None:
                return reason(
                    ReasonKind.LIMIT,
                    f"queue {queue.id} would exceed its limit ({breach}, counting room held for preemptors)",
                    queue=queue.id,
                    breach=breach,
                    held_for_preemptors=1,
                )
        if not job.preemptible:
            promised = own_non_preemptible.get(job.queue, ZERO)
            if mine is not ZERO:
                promised = promised - mine
            if not promised.is_zero():
                quota = protected_breach(state, job, amount + promised)
                if quota is not None:
                    return quota.prefixed(
                        "", ", counting room held for preemptors", held_for_preemptors=1
                    )
        return None

    def _promised(self) -> Promised | None:
        """What is held for the pending preemptors, summed per queue over its subtree, and
        per queue over its own non-preemptible jobs; None when nothing is. Kept while
        `State.hold_changes` stands still (a dispatch drops the holds first)."""
        state = self._state
        key = state.hold_changes
        if self._promised_key != key:
            self._promised_key = key
            self._promised_all = self._promised_sums(state)
        return self._promised_all

    @staticmethod
    def _promised_sums(state: State) -> Promised | None:
        """The sums made afresh. Each queue's `held` is what its jobs hold; a holder that is
        not pending any more is taken out of it, and the non-preemptible holders are summed
        on their own. Amounts are exact integers, so no order of the sums matters.

        Made again whenever a hold changes, over every holder (thousands while many victims
        stop): the loop over them reads only status and kind; the queues that hold anything
        are then found by their `held`, not collected holder by holder."""
        jobs = state.jobs
        per_queue: dict[str, Resources] = {}
        own: dict[str, Resources] = {}
        pending = False
        for holder in state.holders:
            other = jobs[holder]  # a job leaves the table only once its holds are dropped
            if other.status is not _PENDING:
                gone = sum(other.held.values(), ZERO)
                per_queue[other.queue] = per_queue.get(other.queue, ZERO) - gone
            elif other.preemptible:
                pending = True
            else:
                pending = True
                held = sum(other.held.values(), ZERO)
                own[other.queue] = own.get(other.queue, ZERO) + held
        if not pending:
            return None
        subtree: dict[str, Resources] = {}
        for queue_id, queue in state.queues.items():
            held = queue.held
            if queue_id in per_queue:
                held = held + per_queue[queue_id]
            if held.is_zero():
                continue  # holds nothing: no holder of its own (a zero hold adds nothing)
            for ancestor in state.ancestors(queue_id):
                subtree[ancestor.id] = subtree.get(ancestor.id, ZERO) + held
        return subtree, own

    def _capacity_reason(self, job: Job, tasks: int) -> Reason:
        if job.held and job.awaiting:
            return waiting_reason(job)
        key = (job.node_selector, job.per_task, tasks)
        epoch = self._changes()[0]
        cached = self._reasons.get(key)
        if cached is not None and cached[0] == epoch:
            return cached[1]
        found = no_room_reason(self._state, job, tasks)
        self._reasons[key] = (epoch, found)
        return found


_PENDING = JobStatus.PENDING  # read once: the promised sums check it for every holder
_PREEMPTING = ReasonKind.PREEMPTING  # and every waiting preemptor's reason is checked


def waiting_reason(job: Job) -> Reason:
    """Why a preemptor with room held waits: for the victims it awaits to stop. The capacity
    reason `Fitter._capacity_reason` gives it while no size fits."""
    known = waiting_reason_held(job)  # the same victims cycle after cycle, mostly
    if known is not None:
        return known
    awaiting = tuple(sorted(job.awaiting))
    text = f"waiting for preempted jobs to stop: {', '.join(awaiting)}"
    return reason(ReasonKind.PREEMPTING, text, awaiting=awaiting)


def started_reason(job: Job, outcome: Outcome, first: Reason | None) -> Reason | None:
    """The reason of a job for which a preemption just started: a capacity reason from its
    try becomes `waiting_reason`, the one its tries give while it waits for those victims,
    from this cycle on; so a later cycle may pass it over (`Session.still_waiting`)."""
    capacity = first is not None and first.kind is ReasonKind.CAPACITY
    if outcome is Outcome.PREEMPTING and capacity and job.held and job.awaiting:
        return waiting_reason(job)
    return first


def waiting_reason_held(job: Job) -> Reason | None:
    """The reason the job holds, if it is the one a preemptor waiting for exactly the
    victims it awaits is given (only `waiting_reason` makes such a reason, its
    text from these facts): giving it again would change nothing. Else None."""
    known = job.pending_reason
    if known is None or known.kind is not _PREEMPTING or len(known.facts) != 1:
        return None
    name, listed = known.facts[0]
    awaiting = job.awaiting
    if name != "awaiting" or type(listed) is not tuple or len(listed) != len(awaiting):
        return None
    # The facts are (("awaiting", tuple(sorted(awaiting))),): one victim needs no sort.
    if len(listed) == 1:
        return known if listed[0] in awaiting else None
    return known if listed == tuple(sorted(awaiting)) else None


def _own_held(state: State, job: Job) -> Resources:
    """What is held for the job itself while it is a pending preemptor (counted in the
    promised sums), else nothing. Most hold room on one node: that amount, not a new sum."""
    if job.id not in state.holders or job.status is not JobStatus.PENDING:
        return ZERO
    held = job.held
    return next(iter(held.values())) if len(held) == 1 else sum(held.values(), ZERO)


def _held_room_now(state: State, job: Job) -> bool:
    """Whether some node the job holds room on could take one of its tasks now, counting
    what is held for it there: find_placement's first pass would place something.

    Asked at every try of a waiting preemptor, whose victims mostly still run: a node whose
    unallocated room (capacity less allocated, never less than what any job may use there,
    holds or not) is short of one task in some requested resource takes none, which plain
    integers tell without working out the room held for others."""
    per_task, nodes = job.per_task, state.nodes
    gpu, cpu, memory = per_task.gpu, per_task.cpu, per_task.memory
    for node_id in job.held:
        node = nodes[node_id]
        capacity, allocated = node.capacity, node.allocated
        if (
            (gpu > 0 and capacity.gpu - allocated.gpu < gpu)
            or (cpu > 0 and capacity.cpu - allocated.cpu < cpu)
            or (memory > 0 and capacity.memory - allocated.memory < memory)
        ):
            continue
        if copies_held_for(state, job, node_id) > 0:
            return True
    return False
