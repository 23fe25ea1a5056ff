"""A scheduling cycle's session: plug-in lookup, trying a job, dispatch and stop (pure).

One session per cycle, at journal position `seq` and time `ts`. Actions call only its
operations (the `Cycle` protocol of domain.cycle.framework); every change it makes to State
goes through its statement, whose `commit` hands out the cycle's commands at the end.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

from domain.commands import DispatchReason, NodeCommand, Preempt, PreemptReason
from domain.cycle import awaiting
from domain.cycle.fitting import Fitter, started_reason
from domain.cycle.framework import Attempt, Outcome, PluginSet, PreemptionRule, QueuePolicy
from domain.cycle.look_alikes import LookAlikeKeys
from domain.cycle.reclaim_reasons import reclaim_reason
from domain.cycle.statement import Statement
from domain.cycle.try_facts import FAILED, TryFacts
from domain.cycle.victims import VictimSearch
from domain.entities import NO_JOBS, ShapeKey
from domain.nodes import dispatch_command
from domain.placement import PlacementStrategy, Plan
from domain.quota_checks import within_quota
from domain.reasons import Reason, ReasonKind
from domain.state import Job, JobStatus, Queue, State
from domain.trusted import Trusted

T = TypeVar("T")


class Session:
    """One cycle over the state: implements domain.cycle.framework.Cycle."""

    def __init__(self, state: State, plugins: PluginSet, seq: int, ts: int) -> None:
        self._state = state
        self._plugins = plugins
        self._seq = seq
        self._ts = ts
        self._statement = Statement(state)
        self._placed: list[Job] = []  # leave pending lists after the allocate action
        self._dispatched_now: set[str] = set()  # never victims in the same cycle
        self._memo: dict[str, object] = {}  # per-cycle caches of plug-ins, by plug-in name
        # Per job shape: (lasting changes when a job of that shape was found blocked, the
        # answer then: BLOCKED and why).
        self._blocked: dict[ShapeKey, tuple[int, tuple[Outcome, Reason | None]]] = {}
        # Neither helper (this one, the victim search below) keeps a strong reference back
        # to the session: a finished cycle is then freed at once by reference counting,
        # never left for the cyclic garbage collector, whose passes over a large state are
        # the cycle's longest pauses.
        statement, placements = self._statement, plugins.placements
        self._fitter = Fitter(
            state,
            lambda: placements[state.cluster.placement],
            lambda: (statement.epoch, statement.frees),
        )
        # Made on first use: most cycles search no victims (see `_victims`).
        self._victim_search: VictimSearch | None = None
        self._facts = TryFacts(statement)  # what a try found of each rule, asked again
        # The look-alike key of a pending job (`LookAlikeKeys.key`), bound once: asked for
        # every job a walk reaches.
        self._shape = LookAlikeKeys(state, plugins, weakref.proxy(self)).key
        self._dominating: frozenset[str] | None = None

    # -- the view policies and rules get ---------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    @property
    def ts(self) -> int:
        return self._ts

    @property
    def seq(self) -> int:
        return self._seq

    @property
    def plugins(self) -> PluginSet:
        return self._plugins

    @property
    def statement(self) -> Statement:
        return self._statement

    @property
    def placed(self) -> list[Job]:
        return self._placed

    def version(self) -> tuple[int, int]:
        return (self._statement.emitted, self._statement.frees)

    def epoch(self) -> int:
        return self._statement.epoch

    def lasting_changes(self) -> int | None:
        statement = self._statement
        return None if statement.tentative else statement.lasting

    def memo(self, name: str, make: Callable[[], T]) -> T:
        if name not in self._memo:
            self._memo[name] = make()
        return self._memo[name]  # type: ignore[return-value]

    def wake_at(self, due_ts: int, kind: str, ident: str) -> None:
        self._statement.add_timer(due_ts, kind, ident)

    def dominating_reasons(self) -> frozenset[str]:
        if self._dominating is None:
            rules = self._plugins.preemption_rules
            self._dominating = frozenset(rule.reason for rule in rules if not rule.fairness)
        return self._dominating

    def commit(self) -> list[NodeCommand]:
        """The cycle's commands (the statement's commit)."""
        return self._statement.commit()

    # -- plug-ins --------------------------------------------------------------------------

    def policy(self, queue: Queue) -> QueuePolicy:
        return self._plugins.queue_policies[queue.policy.kind]

    def placement(self) -> PlacementStrategy:
        return self._plugins.placements[self._state.cluster.placement]

    # -- trying a job ----------------------------------------------------------------------

    def sizes(self, job: Job) -> list[int]:
        return self._fitter.sizes(job)

    def fit(self, job: Job, tasks: int) -> Attempt:
        return self._fitter.fit(job, tasks)

    def breach(self, job: Job, tasks: int) -> Reason | None:
        return self._fitter.breach(job, tasks)

    def try_schedule(self, job: Job) -> tuple[Outcome, Reason | None]:
        """Places the job now, or starts a preemption for it, or says why it is blocked.

        A job like one found blocked in this cycle, with no lasting change since, is blocked
        for the same reason: a blocked try changes nothing that lasts (its trials roll back),
        and what it reads of the job is its shape (`LookAlikeKeys.key`). So a backlog of
        look-alike jobs costs one try per shape until something is placed, stopped or freed.
        A job with room held for it, victims awaited or displacers to respect is always tried
        in full. Priority is part of the shape only when a preemption rule may read it:
        fitting, the resolvers and the reclaim rules never do."""
        known = self.known_verdict(job)
        if known is not None:
            return known
        shape, changes = self._shape(job), self.lasting_changes()
        outcome, why = self._try(job)
        if (
            outcome is Outcome.BLOCKED
            and shape is not None
            and changes is not None
            and self.lasting_changes() == changes
        ):
            kept = job.pending_reason
            if kept is not None and kept == why:
                # The verdict of an earlier cycle, equal: its look-alikes still hold that
                # object, so Allocate sets none of them again.
                why = kept
            self._blocked[shape] = (changes, (outcome, why))
        return outcome, why

    def known_verdict(self, job: Job) -> tuple[Outcome, Reason | None] | None:
        """What trying the job would give, when a look-alike was found blocked in this cycle
        with no lasting change since (see try_schedule), without trying it; else None. Asked
        for every step of a walk over a backlog, so it is the memo lookup alone."""
        shape = self._shape(job)
        statement = self._statement
        if shape is None or statement.tentative:
            return None
        blocked = self._blocked.get(shape)
        if blocked is not None and blocked[0] == statement.lasting:
            return blocked[1]
        return None

    def still_waiting(self, job: Job) -> bool:
        return awaiting.still_waiting(self._state, self._statement, self._fitter, job)

    def tried_still_waiting(self, job: Job) -> None:
        awaiting.tried_still_waiting(self._state, self._statement, self._fitter, job)

    def started_waiting(self, job: Job) -> None:
        awaiting.started_waiting(self._state, self._statement, self._fitter, job)

    def look_alike_key(self, job: Job) -> ShapeKey | None:
        return self._shape(job)

    def _try(self, job: Job) -> tuple[Outcome, Reason | None]:
        if job.awaiting:
            self.refresh_awaiting(job)
        first_reason: Reason | None = None
        for tasks in self.sizes(job):
            attempt = self.fit(job, tasks)
            if attempt.plan is not None:
                self.dispatch(job, attempt.plan)
                return Outcome.PLACED, None
            first_reason = first_reason or attempt.reason
        if job.awaiting:
            return Outcome.PREEMPTING, first_reason
        if job.held:
            self._statement.drop_holds(job)  # the victims are gone yet it still does not fit
        for resolver in self._plugins.resolvers:
            outcome = resolver(self, job)
            if outcome is not None:
                return outcome, started_reason(job, outcome, first_reason)
        for rule in self._plugins.preemption_rules:
            if self.rule_applies(rule, job) and self.preempt_for(job, rule):
                return Outcome.PREEMPTING, started_reason(job, Outcome.PREEMPTING, first_reason)
        if first_reason is not None and first_reason.kind is ReasonKind.CAPACITY:
            first_reason = reclaim_reason(self, job, first_reason) or first_reason
        return Outcome.BLOCKED, first_reason

    def _victims(self) -> VictimSearch:
        """The cycle's victim search, made on its first use."""
        search = self._victim_search = VictimSearch(weakref.proxy(self), self._dispatched_now)
        return search

    def rule_applies(self, rule: PreemptionRule, job: Job) -> bool:
        # Only fairness rules are asked again in a try (reclaim with moves, the reason).
        facts = self._facts.of(job) if rule.fairness else None
        if facts is None:
            return rule.applies(self, job)
        found = facts.get(rule)
        if found is None:
            found = facts[rule] = rule.applies(self, job)
        return found

    def preempt_for(self, job: Job, rule: PreemptionRule) -> bool:
        search = self._victim_search or self._victims()
        if not rule.fairness:  # searched once a try: only reclaim with moves searches again
            return search.preempt_for(job, rule)
        facts = self._facts.of(job)
        if facts is not None and (FAILED, rule) in facts:
            return False  # it failed since the last lasting change: it would fail again
        found = search.preempt_for(job, rule)
        if not found and facts is not None:
            facts[FAILED, rule] = True  # a failed search changes nothing lasting
        return found

    def may_be_victim(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        # Asked for every candidate of every search: the made search is read directly.
        return (self._victim_search or self._victims()).may_be_victim(job, victim, rule)

    def still_stopping(self, job_id: str) -> bool:
        return awaiting.still_stopping(self._state, job_id)

    def refresh_awaiting(self, job: Job) -> None:
        awaiting.refresh(self._state, self._statement, job)

    # -- commands --------------------------------------------------------------------------

    def dispatch(self, job: Job, plan: Plan, reason: DispatchReason | None = None) -> None:
        """Places the job's tasks, emits one Dispatch per node, and leaves pending."""
        statement = self._statement
        tasks = sum(plan.values())
        # Non-preemptible work (interactive included) is admitted only within deserved quota,
        # counted over the queue's non-preemptible work: it always runs on quota.
        in_quota = not job.preemptible or within_quota(self._state, job, tasks)
        statement.drop_holds(job)
        if job.awaiting:
            statement.set(job, "awaiting", NO_JOBS)
        if job.status is JobStatus.PENDING:
            statement.set(job, "attempt", job.attempt + 1)
            statement.set(job, "status", JobStatus.RUNNING)
            self._placed.append(job)
        self._dispatched_now.add(job.id)
        why: DispatchReason = reason or ("quota" if in_quota else "over_quota")
        state, seq, ts = self._state, self._seq, self._ts
        commands = []
        for node_id in sorted(plan):
            tasks = plan[node_id]
            devices = statement.place(job, node_id, tasks)
            commands.append(dispatch_command(state, job, node_id, tasks, devices, seq, ts, why))
        statement.emit(commands)

    def stop(
        self,
        job: Job,
        reason: PreemptReason,
        by: str | None = None,
        requeue: bool = True,
        nodes: dict[str, int] | None = None,
        emit: bool = True,
    ) -> list[Preempt]:
        """Tells agents to stop the job's tasks (all, or `nodes`); resources stay taken until
        each agent reports JobPreempted. With `emit=False` the commands are returned for the
        caller to emit in its own order."""
        statement = self._statement
        targets = dict(job.placements) if nodes is None else nodes
        commands: list[Preempt] = []
        for node_id in sorted(targets):
            tasks = targets[node_id]
            statement.begin_stop(job, node_id, tasks, requeue)
            commands.append(
                _PREEMPT(
                    job=job.id,
                    node=node_id,
                    tasks=tasks,
                    attempt=job.attempt,
                    seq=self._seq,
                    ts=self._ts,
                    reason=reason,
                    by=by,
                )
            )
        if not job.placements:
            statement.set(job, "status", JobStatus.STOPPING if requeue else JobStatus.CANCELLING)
        if by is not None:
            statement.set(job, "displaced_by", {**job.displaced_by, by: reason})
        if emit:
            statement.emit(commands)
        return commands


_PREEMPT = Trusted(Preempt)  # built from the cycle's own values (domain/trusted.py)
