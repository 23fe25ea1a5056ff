"""A scheduling cycle's session: tentative statements, dispatch and preempt, victim selection (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING

from domain.admission import admission_breach, within_quota
from domain.commands import Dispatch, NodeCommand, Preempt, PreemptReason
from domain.placement import PlacementStrategy, Plan, find_placement, largest_free
from domain.state import Job, JobStatus, Queue, State, Stopping

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
        breach = admission_breach(self.state, job, tasks)
        if breach is not None:
            return Attempt(reason=breach)
        plan = find_placement(self.state, job, tasks, self.placement())
        if plan is None:
            return Attempt(reason=self._capacity_reason(job, tasks))
        return Attempt(plan=plan, tasks=tasks)

    def _capacity_reason(self, job: Job, tasks: int) -> str:
        if job.held and job.awaiting:
            return f"waiting for preempted jobs to stop: {', '.join(sorted(job.awaiting))}"
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
            job.awaiting = {v for v in job.awaiting if self._still_stopping(v)}
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

    def _still_stopping(self, job_id: str) -> bool:
        victim = self.state.jobs.get(job_id)
        return victim is not None and bool(victim.stopping)

    # -- commands -----------------------------------------------------------------------

    def dispatch(self, job: Job, plan: Plan, reason: str | None = None) -> None:
        """Commits a placement: allocates, emits one Dispatch per node, leaves pending."""
        tasks = sum(plan.values())
        in_quota = within_quota(self.state, job, tasks)
        self.state.drop_holds(job)
        job.awaiting.clear()
        if job.status is JobStatus.PENDING:
            job.attempt += 1
            job.status = JobStatus.RUNNING
            self.placed.append(job)
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
            left = job.placements.get(node_id, 0) - tasks
            if left > 0:
                job.placements[node_id] = left
            else:
                job.placements.pop(node_id, None)
            job.stopping[node_id] = Stopping(job.attempt, tasks, requeue)
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
        holds what they free for the job. Issues nothing unless the job can then be placed."""
        candidates = [
            victim
            for queue_id in rule.candidate_queues(self, job)
            for victim in (self.state.jobs[j] for j in sorted(self.state.queues[queue_id].running))
            if self.may_be_victim(job, victim, rule)
        ]
        if not candidates:
            return False
        candidates.sort(key=self.victim_order)
        statement = Statement(self.state)
        chosen: list[Job] = []
        found: Attempt | None = None
        for victim in candidates:
            statement.release_all(victim)
            chosen.append(victim)
            attempt = self.fit(job, job.tasks)
            if attempt.plan is not None and rule.allows_after(self, job, chosen):
                found = attempt
                break
        if found is None:
            statement.rollback()
            return False
        # Drop victims that turned out not to be needed, latest choices kept first.
        for victim in list(reversed(chosen[:-1])):
            statement.rollback()
            statement = Statement(self.state)
            trial = [v for v in chosen if v is not victim]
            for kept in trial:
                statement.release_all(kept)
            attempt = self.fit(job, job.tasks)
            if attempt.plan is not None and rule.allows_after(self, job, trial):
                chosen, found = trial, attempt
        statement.rollback()
        plan = found.plan
        assert plan is not None
        for victim in chosen:
            self.stop(victim, rule.reason, by=job.id)  # type: ignore[arg-type]
            job.awaiting.add(victim.id)
        for node_id in sorted(plan):
            self.state.hold(job, node_id, job.per_task * plan[node_id])
        return True
