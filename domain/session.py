"""A scheduling cycle's session: tentative statements, dispatch and preempt, victim selection (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING

from domain.commands import Dispatch, NodeCommand, Preempt, PreemptReason
from domain.placement import PlacementStrategy, Plan, find_placement, largest_free
from domain.quota_checks import admission_breach, protected_breach, within_quota
from domain.resources import ZERO, Resources
from domain.state import Job, JobStatus, Queue, State

if TYPE_CHECKING:
    from domain.framework import PreemptionRule, QueuePolicy
    from domain.plugins import Plugins


class Outcome(StrEnum):
    PLACED = "placed"
    PREEMPTING = "preempting"  # victims told to stop; their resources are held for the job
    BLOCKED = "blocked"


class Statement:
    """Tentative releases and allocations, undone exactly by rollback (KAI's statement)."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._undo: list[Callable[[], None]] = []

    def release_all(self, job: Job) -> None:
        """Pretends the job's tasks are gone (its placements, not what is already stopping)."""
        for node_id, tasks in sorted(job.placements.items()):
            self._state.release(job, node_id, tasks)
            del job.placements[node_id]
            self._undo.append(partial(self._undo_release, job, node_id, tasks))

    def allocate(self, job: Job, plan: Plan) -> None:
        for node_id, tasks in sorted(plan.items()):
            self._state.allocate(job, node_id, tasks)
            self._undo.append(partial(self._undo_allocate, job, node_id, tasks))

    def _undo_release(self, job: Job, node_id: str, tasks: int) -> None:
        self._state.allocate(job, node_id, tasks)

    def _undo_allocate(self, job: Job, node_id: str, tasks: int) -> None:
        self._state.release(job, node_id, tasks)
        left = job.placements.get(node_id, 0) - tasks
        if left > 0:
            job.placements[node_id] = left
        else:
            job.placements.pop(node_id, None)

    def rollback(self) -> None:
        needs_cycle = self._state.needs_cycle
        while self._undo:
            self._undo.pop()()
        self._state.needs_cycle = needs_cycle


@dataclass
class Attempt:
    """What trying one job found: a plan and the tasks it is for, or why not."""

    plan: Plan | None = None
    tasks: int = 0
    reason: str = ""


@dataclass
class Session:
    """One cycle at journal position `seq` and time `ts`: actions call only this."""

    state: State
    plugins: Plugins
    seq: int
    ts: int
    commands: list[NodeCommand] = field(default_factory=list)
    placed: list[Job] = field(default_factory=list)  # left pending lists after the cycle
    dispatched_now: set[str] = field(default_factory=set)  # never victims in the same cycle
    # Victim searches that found nothing, by rule and job shape, with the state version then.
    failed_searches: dict[tuple[object, ...], tuple[int, int]] = field(default_factory=dict)
    # Per-cycle caches of plug-ins (e.g. reclaim's in-flight amounts), keyed by plug-in name.
    memo: dict[str, object] = field(default_factory=dict, repr=False)
    # Shapes (selector, per-task request, tasks) that found no room in this cycle, valid while
    # state.freed is unchanged: free capacity only shrinks meanwhile, so any job with the same
    # selector (or none) asking at least as much per task for at least as many tasks cannot
    # fit either. Keeps a round-robin scan over a full cluster cheap without changing a decision.
    _no_room: dict[tuple[tuple[str, str], ...], list[tuple[Resources, int]]] = field(
        default_factory=dict, repr=False
    )
    _no_room_freed: int = field(default=-1, repr=False)
    # The same reason text for the same shape while no node changed (node_index.version):
    # formatting it is most of what a blocked try costs on a full cluster.
    _reasons: dict[tuple[tuple[tuple[str, str], ...], Resources, int], tuple[int, str]] = field(
        default_factory=dict, repr=False
    )

    # -- plug-ins -----------------------------------------------------------------------

    def policy(self, queue: Queue) -> QueuePolicy:
        return self.plugins.queue_policies[queue.policy.kind]

    def placement(self) -> PlacementStrategy:
        return self.plugins.placements[self.state.cluster.placement]

    # -- trying a job -------------------------------------------------------------------

    def sizes(self, job: Job) -> list[int]:
        """Full size first; an elastic job then halves again and again down to min_tasks."""
        sizes = [job.tasks]
        while sizes[-1] > job.min_tasks:
            sizes.append(max(job.min_tasks, sizes[-1] // 2))
        return sizes

    def fit(self, job: Job, tasks: int) -> Attempt:
        """Checks quota and limits, then finds nodes, for `tasks` of the job; changes nothing."""
        breach = admission_breach(self.state, job, tasks) or self._reserved_breach(job, tasks)
        if breach is not None:
            return Attempt(reason=breach)
        if not job.held and self._known_no_room(job, tasks):
            return Attempt(reason=self._capacity_reason(job, tasks))
        plan = find_placement(self.state, job, tasks, self.placement())
        if plan is None:
            if not job.held:  # what is held for a job widens its room; not a general shape
                self._remember_no_room(job, tasks)
            return Attempt(reason=self._capacity_reason(job, tasks))
        return Attempt(plan=plan, tasks=tasks)

    def _reserved_breach(self, job: Job, tasks: int) -> str | None:
        """Why `tasks` of the job would use quota or limit headroom that a preemption already
        promised to another job, or None.

        Held room keeps node capacity for a preemptor, but the preemptor must also still pass
        its quota and limit checks once its victims stop; without this, a job of the same
        queue placed meanwhile could use that headroom and leave the held room idle."""
        state = self.state
        others = [
            state.jobs[h]
            for h in sorted(state.holders)
            if h != job.id and h in state.jobs and state.jobs[h].status is JobStatus.PENDING
        ]
        if not others:
            return None
        amount = job.per_task * tasks
        for queue in state.ancestors(job.queue):
            promised = ZERO
            for other in others:
                if any(q.id == queue.id for q in state.ancestors(other.queue)):
                    promised = promised + sum(other.held.values(), ZERO)
            if promised.is_zero():
                continue
            breach = queue.quota.limit_breach(queue.subtree_allocated + amount + promised)
            if breach is not None:
                return f"queue {queue.id} would exceed its limit ({breach}, counting room held for preemptors)"
        if not job.preemptible:
            promised = ZERO
            for other in others:
                if other.queue == job.queue and not other.preemptible:
                    promised = promised + sum(other.held.values(), ZERO)
            if not promised.is_zero():
                breach = protected_breach(state, job, amount + promised)
                if breach is not None:
                    return f"{breach}, counting room held for preemptors"
        return None

    def _known_no_room(self, job: Job, tasks: int) -> bool:
        if self._no_room_freed != self.state.freed:
            self._no_room.clear()
            self._no_room_freed = self.state.freed
            return False
        for selector in ((), job.node_selector) if job.node_selector else ((),):
            for per_task, failed_tasks in self._no_room.get(selector, ()):
                if failed_tasks <= tasks and per_task.fits_in(job.per_task):
                    return True
        return False

    def _remember_no_room(self, job: Job, tasks: int) -> None:
        shapes = self._no_room.setdefault(job.node_selector, [])
        # Keep only the smallest shapes: one that the new shape covers says nothing more.
        shapes[:] = [
            (per_task, failed_tasks)
            for per_task, failed_tasks in shapes
            if not (tasks <= failed_tasks and job.per_task.fits_in(per_task))
        ]
        shapes.append((job.per_task, tasks))

    def _capacity_reason(self, job: Job, tasks: int) -> str:
        if job.held and job.awaiting:
            return f"waiting for preempted jobs to stop: {', '.join(sorted(job.awaiting))}"
        key = (job.node_selector, job.per_task, tasks)
        version = self.state.node_index.version
        cached = self._reasons.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        reason = self._no_room_reason(job, tasks)
        self._reasons[key] = (version, reason)
        return reason

    def _no_room_reason(self, job: Job, tasks: int) -> str:
        largest = largest_free(self.state)
        if largest is None:
            return "no live nodes"
        if not job.per_task.fits_in(self.state.capacity):
            return f"one task ({job.per_task}) is larger than the whole cluster"
        selector = ""
        if job.node_selector:
            selector = " matching " + ",".join(f"{k}={v}" for k, v in job.node_selector)
        return f"no room on nodes{selector} for {tasks} task(s) of {job.per_task} (most free node: {largest})"

    def try_schedule(self, job: Job) -> tuple[Outcome, str]:
        """Places the job now, or starts a preemption for it, or says why it is blocked."""
        if job.awaiting:
            job.awaiting = {v for v in job.awaiting if self.still_stopping(v)}
        first_reason = ""
        for tasks in self.sizes(job):
            attempt = self.fit(job, tasks)
            if attempt.plan is not None:
                self.dispatch(job, attempt.plan)
                return Outcome.PLACED, ""
            first_reason = first_reason or attempt.reason
        if job.awaiting:
            return Outcome.PREEMPTING, first_reason
        if job.held:
            self.state.drop_holds(job)  # the victims are gone yet it still does not fit
        for resolver in self.plugins.resolvers:
            outcome = resolver(self, job)
            if outcome is not None:
                return outcome, first_reason
        for rule in self.plugins.preemption_rules:
            if rule.applies(self, job) and self.preempt_for(job, rule):
                return Outcome.PREEMPTING, first_reason
        return Outcome.BLOCKED, first_reason

    def still_stopping(self, job_id: str) -> bool:
        victim = self.state.jobs.get(job_id)
        return victim is not None and bool(victim.stopping)

    # -- commands -----------------------------------------------------------------------

    def dispatch(self, job: Job, plan: Plan, reason: str | None = None) -> None:
        """Commits a placement: allocates, emits one Dispatch per node, leaves pending."""
        tasks = sum(plan.values())
        # Non-preemptible work (interactive included) is admitted only within deserved quota,
        # counted over the queue's non-preemptible work: it always runs on quota.
        in_quota = not job.preemptible or within_quota(self.state, job, tasks)
        self.state.drop_holds(job)
        job.awaiting.clear()
        if job.status is JobStatus.PENDING:
            job.attempt += 1
            job.status = JobStatus.RUNNING
            self.placed.append(job)
        self.dispatched_now.add(job.id)
        Statement(self.state).allocate(job, plan)
        why = reason or ("quota" if in_quota else "over_quota")
        for node_id in sorted(plan):
            self.commands.append(
                Dispatch(
                    job=job.id,
                    node=node_id,
                    tasks=plan[node_id],
                    resources=job.per_task.to_wire(),
                    attempt=job.attempt,
                    seq=self.seq,
                    ts=self.ts,
                    reason=why,
                )
            )

    def stop(
        self,
        job: Job,
        reason: PreemptReason,
        by: str | None = None,
        requeue: bool = True,
        nodes: dict[str, int] | None = None,
    ) -> None:
        """Tells agents to stop the job's tasks (all, or `nodes`); resources stay taken until
        each agent reports JobPreempted."""
        targets = dict(job.placements) if nodes is None else nodes
        for node_id in sorted(targets):
            tasks = targets[node_id]
            self.state.begin_stop(job, node_id, tasks, requeue)
            self.commands.append(
                Preempt(
                    job=job.id,
                    node=node_id,
                    tasks=tasks,
                    attempt=job.attempt,
                    seq=self.seq,
                    ts=self.ts,
                    reason=reason,
                    by=by,
                )
            )
        if not job.placements:
            job.status = JobStatus.STOPPING if requeue else JobStatus.CANCELLING
        if by is not None:
            job.displaced_by[by] = reason

    # -- preemption: the one victim selector --------------------------------------------

    def victim_order(self, victim: Job) -> tuple[int, int, str]:
        """Least disruption first: lowest priority, then most recently started."""
        started = victim.started_ts if victim.started_ts is not None else self.ts
        return (victim.priority, -started, victim.id)

    def may_be_victim(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        if victim.id == job.id or not victim.preemptible or victim.interactive:
            return False
        if victim.status is not JobStatus.RUNNING or victim.stopping or not victim.placements:
            return False
        if victim.id in self.dispatched_now:
            return False  # dispatching and preempting a job in one breath is pure churn
        if not rule.admits(self, job, victim):
            return False
        return not self.could_preempt_back(victim, job, rule)

    def could_preempt_back(self, victim: Job, job: Job, rule: PreemptionRule) -> bool:
        """No preemption cycles: `victim` could, under any rule, preempt `job` right back.

        Explicit PAI rules dominate fairness: for a self-level or child-level preemption the
        fairness rule (reclaim) is not counted, so the displaced do not reclaim from it.
        """
        if not job.preemptible or job.interactive:
            return False
        explicit = rule.reason in ("self_level", "child_level")
        for other in self.plugins.preemption_rules:
            if explicit and other.reason == "reclaim":
                continue
            if other.admits(self, victim, job):
                return True
        return False

    def preempt_for(self, job: Job, rule: PreemptionRule) -> bool:
        """Finds the least disruptive victims under `rule` that let the job run, stops them and
        holds what they free for the job. Issues nothing unless the job can then be placed.

        Victims are taken in steps (a whole job, or, cheaper, one halving of an elastic job
        towards min_tasks), least disruption first. A placement is only simulated once the
        room freed, counted incrementally per node, could hold the job; minimising then drops
        unneeded steps, newest choices kept, each check O(nodes it touches) before any fit.
        See docs/preemption.md.
        """
        # A job like one whose search already failed, with nothing issued or freed since,
        # fails too: pending jobs of one queue often share a shape, and each search walks the
        # candidate queues' running jobs. Jobs displaced earlier are judged on their own.
        shape = (
            rule.reason,
            job.queue,
            job.priority,
            job.module,
            job.interactive,
            job.preemptible,
            job.per_task,
            job.tasks,
            job.min_tasks,
            job.node_selector,
        )
        if not job.displaced_by and self.failed_searches.get(shape) == self._version():
            return False
        if not self._search(job, rule):
            if not job.displaced_by:
                # Taken after the search: its tentative releases count as frees too.
                self.failed_searches[shape] = self._version()
            return False
        return True

    def _version(self) -> tuple[int, int]:
        return (len(self.commands), self.state.freed)

    def _search(self, job: Job, rule: PreemptionRule) -> bool:
        candidates = [
            victim
            for queue_id in rule.candidate_queues(self, job)
            for victim in (self.state.jobs[j] for j in sorted(self.state.queues[queue_id].running))
            if self.may_be_victim(job, victim, rule)
        ]
        if not candidates:
            return False
        steps = sorted(
            (step for victim in candidates for step in victim_steps(victim)),
            key=lambda step: self.step_order(step),
        )
        room = Room(self.state, job)
        bound = room.total_if_freed(steps)
        target = next((size for size in self.sizes(job) if size <= bound), None)
        if target is None:
            return False
        needs_cycle = self.state.needs_cycle
        chosen: list[VictimStep] = []
        victims: list[Job] = []  # distinct, in order of choice, kept as steps are taken
        found: Attempt | None = None
        for step in steps:
            room.take(step)
            chosen.append(step)
            if step.index == 0:
                victims.append(step.victim)
            if room.total < target:
                continue
            attempt = self.fit(job, target)
            if attempt.plan is not None and rule.allows_after(self, job, victims):
                found = attempt
                break
        if found is not None:
            found = self._minimise(job, rule, room, chosen, target, found)
        for step in reversed(chosen):
            room.give_back(step)
        self.state.needs_cycle = needs_cycle
        if found is None or found.plan is None:
            return False
        self._issue(job, rule, chosen, found.plan)
        return True

    def step_order(self, step: VictimStep) -> tuple[int, int, int, str, int]:
        """Lowest priority first; shrinking before stopping any whole job of that priority;
        then most recently started; then id, then the victim's own step order."""
        priority, recent, victim_id = self.victim_order(step.victim)
        return (priority, 0 if step.shrink else 1, recent, victim_id, step.index)

    def _minimise(
        self,
        job: Job,
        rule: PreemptionRule,
        room: Room,
        chosen: list[VictimStep],
        target: int,
        found: Attempt,
    ) -> Attempt:
        """Drops steps the job turns out not to need (in place), latest choices kept first.

        A victim's chosen steps are a prefix of its steps, and only the last of them may be
        dropped (its remaining tasks cannot stop while its extra ones keep running); a fit
        is tried only when the room left could still hold the job."""
        last: dict[str, int] = {}
        for step in chosen:
            last[step.victim.id] = step.index
        kept = [True] * len(chosen)
        for position in range(len(chosen) - 2, -1, -1):
            step = chosen[position]
            if last[step.victim.id] != step.index:
                continue
            room.give_back(step)
            if room.total >= target:
                attempt = self.fit(job, target)
                if attempt.plan is not None:
                    kept[position] = False
                    trial = [s for s, keep in zip(chosen, kept, strict=True) if keep]
                    if rule.allows_after(self, job, victims_of(trial)):
                        found = attempt
                        last[step.victim.id] = step.index - 1
                        continue
                    kept[position] = True
            room.take(step)
        chosen[:] = [s for s, keep in zip(chosen, kept, strict=True) if keep]
        return found

    def _issue(self, job: Job, rule: PreemptionRule, chosen: list[VictimStep], plan: Plan) -> None:
        whole = {step.victim.id for step in chosen if not step.shrink}
        issued: set[str] = set()
        for step in chosen:
            victim = step.victim
            if victim.id in issued:
                continue
            issued.add(victim.id)
            if victim.id in whole:
                self.stop(victim, rule.reason, by=job.id)  # type: ignore[arg-type]
            else:
                nodes: dict[str, int] = {}
                for shrink in chosen:
                    if shrink.victim is victim:
                        for node_id, tasks in shrink.nodes:
                            nodes[node_id] = nodes.get(node_id, 0) + tasks
                self.stop(victim, "shrink", by=job.id, requeue=False, nodes=nodes)
            job.awaiting.add(victim.id)
        for node_id in sorted(plan):
            self.state.hold(job, node_id, job.per_task * plan[node_id])


@dataclass(frozen=True)
class VictimStep:
    """Tasks of one victim to stop: one halving of an elastic job (`shrink`, never below
    min_tasks), or all that is left of it. A victim's steps are always taken in order."""

    victim: Job
    nodes: tuple[tuple[str, int], ...]
    shrink: bool
    index: int = 0  # position among the victim's steps


def victim_steps(victim: Job) -> list[VictimStep]:
    """A gang is stopped whole; an elastic job may first give up tasks by halves down to
    min_tasks (as Run:AI shrinks), each time from the nodes where it has the fewest tasks so
    that what keeps running stays together."""
    placed = dict(victim.placements)
    size = sum(placed.values())
    steps: list[VictimStep] = []
    while victim.is_elastic and size > victim.min_tasks:
        extra = size - max(victim.min_tasks, size // 2)
        size -= extra
        taken: dict[str, int] = {}
        for node_id, tasks in sorted(placed.items(), key=lambda item: (item[1], item[0])):
            take = min(tasks, extra)
            extra -= take
            if take:
                taken[node_id] = take
                placed[node_id] = tasks - take
            if extra == 0:
                break
        placed = {node_id: tasks for node_id, tasks in placed.items() if tasks}
        steps.append(VictimStep(victim, tuple(sorted(taken.items())), True, len(steps)))
    steps.append(VictimStep(victim, tuple(sorted(placed.items())), False, len(steps)))
    return steps


def victims_of(steps: list[VictimStep]) -> list[Job]:
    seen: dict[str, Job] = {}
    for step in steps:
        seen.setdefault(step.victim.id, step.victim)
    return list(seen.values())


class Room:
    """How many of a job's tasks the live nodes it may use could hold, kept per node so that
    releasing or restoring a victim's tasks costs only the nodes it touches.

    Only nodes the free-capacity index says could hold one task are counted up front (on a
    full cluster, few or none); any other node holds none now and is counted when a victim's
    tasks on it are taken."""

    def __init__(self, state: State, job: Job) -> None:
        self._state = state
        self._job = job
        self._copies: dict[str, int] = {}
        self.total = 0
        for node_id in state.node_index.fullest_first(job.per_task.gpu):
            node = state.nodes[node_id]
            if node.matches(job.node_selector):
                copies = job.per_task.max_copies_in(node.free)
                if copies:
                    self._copies[node_id] = copies
                    self.total += copies

    def _usable(self, node_id: str) -> bool:
        node = self._state.nodes[node_id]
        return not node.lost and node.matches(self._job.node_selector)

    def nodes(self) -> list[str]:
        """The live nodes the job may use, sorted (visits every node: for consolidation)."""
        return [node_id for node_id in sorted(self._state.nodes) if self._usable(node_id)]

    def total_if_freed(self, steps: list[VictimStep]) -> int:
        freed: dict[str, Resources] = {}
        for step in steps:
            for node_id, tasks in step.nodes:
                freed[node_id] = freed.get(node_id, ZERO) + step.victim.per_task * tasks
        total = self.total
        for node_id in sorted(freed):
            if self._usable(node_id):
                node = self._state.nodes[node_id]
                copies = self._job.per_task.max_copies_in(node.free + freed[node_id])
                total += copies - self._copies.get(node_id, 0)
        return total

    def recount(self, node_id: str) -> None:
        if self._usable(node_id):
            copies = self._job.per_task.max_copies_in(self._state.nodes[node_id].free)
            self.total += copies - self._copies.get(node_id, 0)
            self._copies[node_id] = copies

    def take(self, step: VictimStep) -> None:
        """Pretends the step's tasks are stopped."""
        victim = step.victim
        for node_id, tasks in step.nodes:
            self._state.release(victim, node_id, tasks)
            left = victim.placements[node_id] - tasks
            if left > 0:
                victim.placements[node_id] = left
            else:
                del victim.placements[node_id]
            self.recount(node_id)

    def give_back(self, step: VictimStep) -> None:
        """Undoes `take` exactly."""
        for node_id, tasks in step.nodes:
            self._state.allocate(step.victim, node_id, tasks)
            self.recount(node_id)
