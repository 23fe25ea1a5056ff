"""The one victim selector every preemption rule shares: steps, room, search, minimisation (pure).

Universal filters (preemptible, not interactive, no preemption cycles), least disruption
order (lowest priority, then most recently started), tentative releases in the cycle's
statement, a fit once the room freed could hold the job, minimisation, rollback, and only
then Preempt commands; the freed resources are held for the preemptor until it is placed.
See docs/preemption.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.cycle.framework import Attempt, Cycle, PreemptionRule
from domain.cycle.statement import Statement
from domain.resources import ZERO, Resources
from domain.state import Job, JobStatus, State


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
    tasks on it are taken. Taking and giving back go through the statement, whose rollback
    undoes them all."""

    def __init__(self, state: State, statement: Statement, job: Job) -> None:
        self._state = state
        self._statement = statement
        self._job = job
        self._copies: dict[str, int] = {}
        self.total = 0
        for node_id in state.node_index.fullest_first(job.per_task.gpu):
            node = state.nodes[node_id]
            if node.matches(job.node_selector):
                copies = node.copies(job.per_task)
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
            copies = self._state.nodes[node_id].copies(self._job.per_task)
            self.total += copies - self._copies.get(node_id, 0)
            self._copies[node_id] = copies

    def take(self, step: VictimStep) -> None:
        """Pretends the step's tasks are stopped."""
        for node_id, tasks in step.nodes:
            self._statement.unplace(step.victim, node_id, tasks)
            self.recount(node_id)

    def give_back(self, step: VictimStep) -> None:
        """Undoes `take` (the statement's rollback restores placement order as well)."""
        for node_id, tasks in step.nodes:
            self._statement.place(step.victim, node_id, tasks)
            self.recount(node_id)


class VictimSearch:
    """Finds, for a blocked job and one rule, the least disruptive victims that let it run."""

    def __init__(self, cycle: Cycle, dispatched_now: set[str]) -> None:
        self._cycle = cycle
        self._dispatched_now = dispatched_now  # never victims in the same cycle
        # Searches that found nothing, by rule and job shape, with the cycle's version then.
        self._failed: dict[tuple[object, ...], tuple[int, int]] = {}

    def victim_order(self, victim: Job) -> tuple[int, int, str]:
        """Least disruption first: lowest priority, then most recently started."""
        started = victim.started_ts if victim.started_ts is not None else self._cycle.ts
        return (victim.priority, -started, victim.id)

    def step_order(self, step: VictimStep) -> tuple[int, int, int, str, int]:
        """Lowest priority first; shrinking before stopping any whole job of that priority;
        then most recently started; then id, then the victim's own step order."""
        priority, recent, victim_id = self.victim_order(step.victim)
        return (priority, 0 if step.shrink else 1, recent, victim_id, step.index)

    def may_be_victim(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        if victim.id == job.id or not victim.preemptible or victim.interactive:
            return False
        if victim.status is not JobStatus.RUNNING or victim.stopping or not victim.placements:
            return False
        if victim.id in self._dispatched_now:
            return False  # dispatching and preempting a job in one breath is pure churn
        if not rule.admits(self._cycle, job, victim):
            return False
        return not self.could_preempt_back(victim, job, rule)

    def could_preempt_back(self, victim: Job, job: Job, rule: PreemptionRule) -> bool:
        """No preemption cycles: `victim` could, under any rule, preempt `job` right back.

        Explicit PAI rules dominate fairness: for an explicit rule's preemption the fairness
        rules are not counted, so the displaced do not reclaim from it.
        """
        if not job.preemptible or job.interactive:
            return False
        for other in self._cycle.plugins.preemption_rules:
            if rule.explicit and other.fairness:
                continue
            if other.admits(self._cycle, victim, job):
                return True
        return False

    def preempt_for(self, job: Job, rule: PreemptionRule) -> bool:
        """Finds the least disruptive victims under `rule` that let the job run, stops them and
        holds what they free for the job. Issues nothing unless the job can then be placed.

        Victims are taken in steps (a whole job, or, cheaper, one halving of an elastic job
        towards min_tasks), least disruption first. A placement is only simulated once the
        room freed, counted incrementally per node, could hold the job; minimising then drops
        unneeded steps, newest choices kept, each check O(nodes it touches) before any fit.
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
        if not job.displaced_by and self._failed.get(shape) == self._cycle.version():
            return False
        if not self._search(job, rule):
            if not job.displaced_by:
                # Taken after the search: its rollback counts as a change too.
                self._failed[shape] = self._cycle.version()
            return False
        return True

    def _search(self, job: Job, rule: PreemptionRule) -> bool:
        cycle = self._cycle
        state = cycle.state
        candidates = [
            victim
            for queue_id in rule.candidate_queues(cycle, job)
            for victim in (state.jobs[j] for j in sorted(state.queues[queue_id].running))
            if self.may_be_victim(job, victim, rule)
        ]
        if not candidates:
            return False
        steps = sorted(
            (step for victim in candidates for step in victim_steps(victim)),
            key=self.step_order,
        )
        statement = cycle.statement
        room = Room(state, statement, job)
        bound = room.total_if_freed(steps)
        target = next((size for size in cycle.sizes(job) if size <= bound), None)
        if target is None:
            return False
        checkpoint = statement.checkpoint()
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
            attempt = cycle.fit(job, target)
            if attempt.plan is not None and rule.allows_after(cycle, job, victims):
                found = attempt
                break
        if found is not None:
            found = self._minimise(job, rule, room, chosen, target, found)
        statement.rollback(checkpoint)
        if found is None or found.plan is None:
            return False
        self._issue(job, rule, chosen, found.plan)
        return True

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
                attempt = self._cycle.fit(job, target)
                if attempt.plan is not None:
                    kept[position] = False
                    trial = [s for s, keep in zip(chosen, kept, strict=True) if keep]
                    if rule.allows_after(self._cycle, job, victims_of(trial)):
                        found = attempt
                        last[step.victim.id] = step.index - 1
                        continue
                    kept[position] = True
            room.take(step)
        chosen[:] = [s for s, keep in zip(chosen, kept, strict=True) if keep]
        return found

    def _issue(
        self, job: Job, rule: PreemptionRule, chosen: list[VictimStep], plan: dict[str, int]
    ) -> None:
        cycle = self._cycle
        whole = {step.victim.id for step in chosen if not step.shrink}
        issued: set[str] = set()
        for step in chosen:
            victim = step.victim
            if victim.id in issued:
                continue
            issued.add(victim.id)
            if victim.id in whole:
                cycle.stop(victim, rule.reason, by=job.id)
            else:
                nodes: dict[str, int] = {}
                for shrink in chosen:
                    if shrink.victim is victim:
                        for node_id, tasks in shrink.nodes:
                            nodes[node_id] = nodes.get(node_id, 0) + tasks
                cycle.stop(victim, "shrink", by=job.id, requeue=False, nodes=nodes)
            cycle.statement.set(job, "awaiting", job.awaiting | {victim.id})
        for node_id in sorted(plan):
            cycle.statement.hold(job, node_id, job.per_task * plan[node_id])
