"""The scheduling cycle's plug-in points and the view of the cycle they get (pure).

As in KAI's framework, a cycle opens a session over the state; actions (settle, allocate,
expand, ...) call only the cycle's operations (`Cycle`); queue policies and preemption rules
see a small read-only view of it (`CycleView`). Both are protocols, so no plug-in imports
the concrete session (domain.cycle.session), and the registry (domain.plugins) is the only
module that names every plug-in. A new policy is a new module and one registry line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from domain.commands import DispatchReason, Preempt, PreemptReason
from domain.cycle.statement import Statement
from domain.entities import ShapeKey
from domain.placement import PlacementStrategy, Plan
from domain.reasons import Reason
from domain.state import Job, Queue, State

T = TypeVar("T")


class Verdict(StrEnum):
    """What a blocked job does to the rest of its queue in this cycle."""

    STOP = "stop"  # nothing behind it is placed
    SKIP = "skip"  # the next job is tried


class Outcome(StrEnum):
    """What trying a job did."""

    PLACED = "placed"
    PREEMPTING = "preempting"  # victims told to stop; their resources are held for the job
    BLOCKED = "blocked"


@dataclass
class Attempt:
    """What fitting `tasks` of a job found: a plan, or why not."""

    plan: Plan | None = None
    tasks: int = 0
    reason: Reason | None = None


class CycleView(Protocol):
    """What queue policies and preemption rules may see of a cycle: the state, read only,
    the time, how much the cycle has issued and changed so far (for their caches), and a
    per-cycle memo. `wake_at` only asks for a later cycle."""

    @property
    def state(self) -> State: ...

    @property
    def ts(self) -> int: ...

    def version(self) -> tuple[int, int]:
        """(commands issued, frees seen) in this cycle: both only grow."""
        ...

    def epoch(self) -> int:
        """A number that changes whenever an allocation, hold or stop changes in this cycle
        (tentative changes and rollbacks included): a cache of queue usage may key on it."""
        ...

    def lasting_changes(self) -> int | None:
        """How many changes of this cycle have lasted so far (tentative work that was rolled
        back does not count), or None while a checkpoint is open: a cache of what depends
        only on the state may key on it."""
        ...

    def memo(self, name: str, make: Callable[[], T]) -> T:
        """A per-cycle value kept under `name` (created by `make` on first use)."""
        ...

    def wake_at(self, due_ts: int, kind: str, ident: str) -> None:
        """Asks for a cycle at `due_ts` even if nothing else happens by then."""
        ...

    def dominating_reasons(self) -> frozenset[str]:
        """The Preempt reasons of the rules registered for this cycle that are not fairness
        rules (the explicit PAI rules, priority, interactive): fairness never takes back what
        they decided, directly or through a chain (domain/cycle/displacement.py)."""
        ...


class QueuePolicy(Protocol):
    """How a queue orders its pending jobs and what a blocked job does to those behind it.

    `kind` is the policy's name in QueueConfigured.policy.kind; `blocking` and `skipping`
    say, in a sentence ending before the core's own reason, why a blocked job stops its
    queue or is skipped (the pending view). `walk_settles` is True only for a policy that
    skips every blocked job and orders jobs without reading time (round robin): Allocate
    may then step only the first job of each shape of a queue it found all blocked, while
    none of its pending jobs changes (domain/actions/settled_walk.py). `ages` is True when
    `effective_priority` reads more than the job's own priority (time, say): only then are
    the pending lists merged by it (domain/cycle/ordering.py)."""

    kind: str
    walk_settles: bool
    ages: bool

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        """The priority the job is ordered by now; must not rise along a list of equal
        base priority in submission order (older jobs rank at least as high)."""
        ...

    def on_blocked(self, job: Job, queue: Queue, cycle: CycleView) -> Verdict: ...

    def skips_in(self, job: Job, queue: Queue, now: int) -> float | None:
        """Seconds left before the policy skips a job that stops its queue, if it ever does."""
        ...

    def blocking(self, job: Job, queue: Queue, skip_in_s: float | None) -> str:
        """Why the blocked job stops its queue: a sentence the core's reason follows."""
        ...

    def skipping(self, job: Job, queue: Queue) -> str:
        """Why the blocked job was skipped: a sentence the core's reason follows."""
        ...


class PreemptionRule(Protocol):
    """One kind of preemption (reclaim, priority, interactive, self-level, child-level).

    `reason` is the Preempt reason it issues; `explains` what it did, for explain;
    `explicit` marks a PAI rule that dominates fairness (its victims do not reclaim from the
    preemptor, and fairness rules are not counted when checking for preemption cycles);
    `fairness` marks a rule that explicit rules override. `applies` says whether the rule
    may act for this blocked job at all; `admits` filters victims (AND-ed with the universal
    filters: preemptible, not interactive, no preemption cycles). The shared victim selector
    (domain.cycle.victims) does the rest."""

    reason: PreemptReason
    explains: str
    explicit: bool
    fairness: bool

    def applies(self, cycle: CycleView, job: Job) -> bool: ...

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterable[str]:
        """Queues whose running jobs may be victims (sorted)."""
        ...

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        """Whether `victim` may be stopped for `job`. It reads of either job only its shape
        (`Job.shape`) and, of displacements, `dominating_superiors`: the victim search judges
        look-alike victims once (domain/cycle/candidates.py)."""
        ...

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        """A check over the whole victim set, e.g. reclaim's 'no victim queue below its fair
        share'; True when the set is acceptable."""
        ...

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        """Whether any verdict of the rule in this cycle may depend on the pending job's
        priority: with the job as preemptor (`applies`, `admits`), or as the victim of a
        running job (`admits`, asked to rule out preemption cycles). When no rule's does,
        look-alike jobs of any priority share one try (`Session.try_schedule`). A rule
        unsure says True. The answer may read only the job's queue and the configuration (the
        queue tree, its policies and preemption settings): it is asked once per queue and
        kept until the configuration changes (`State.configuration_memo`)."""
        ...


class Cycle(CycleView, Protocol):
    """What actions and resolvers may do in a cycle; every change goes through here (and so
    through the cycle's statement)."""

    @property
    def seq(self) -> int: ...

    @property
    def plugins(self) -> PluginSet: ...

    @property
    def placed(self) -> list[Job]: ...

    def policy(self, queue: Queue) -> QueuePolicy: ...

    def placement(self) -> PlacementStrategy: ...

    def sizes(self, job: Job) -> list[int]: ...

    def fit(self, job: Job, tasks: int) -> Attempt: ...

    def breach(self, job: Job, tasks: int) -> Reason | None:
        """Why quota, limits or room promised to preemptors forbid `tasks` more of the job
        (what `fit` checks before it looks for nodes), or None."""
        ...

    def try_schedule(self, job: Job) -> tuple[Outcome, Reason | None]: ...

    def known_verdict(self, job: Job) -> tuple[Outcome, Reason | None] | None:
        """What try_schedule would give, known without a try (a blocked look-alike's)."""

    def still_waiting(self, job: Job) -> bool:
        """Whether trying the job (awaiting victims) would leave it waiting, unchanged."""
        ...

    def tried_still_waiting(self, job: Job) -> None:
        """Notes that a try of the job (awaiting victims) left it waiting and changed
        nothing: later walks may pass it over (domain/cycle/parked.py)."""
        ...

    def started_waiting(self, job: Job) -> None:
        """Notes that a try of the job just started a preemption for it and left it waiting
        for those victims: later walks may pass it over (domain/cycle/parked.py)."""
        ...

    def look_alike_key(self, job: Job) -> ShapeKey | None:
        """The key the job's look-alikes share, or None for a job always tried in full."""

    def still_stopping(self, job_id: str) -> bool: ...

    def refresh_awaiting(self, job: Job) -> None:
        """Drops from the job's awaited victims those no longer stopping."""
        ...

    def dispatch(self, job: Job, plan: Plan, reason: DispatchReason | None = None) -> None: ...

    def stop(
        self,
        job: Job,
        reason: PreemptReason,
        by: str | None = None,
        requeue: bool = True,
        nodes: dict[str, int] | None = None,
        emit: bool = True,
    ) -> list[Preempt]: ...

    @property
    def statement(self) -> Statement: ...

    def rule_applies(self, rule: PreemptionRule, job: Job) -> bool:
        """`rule.applies`, asked once per job and fairness rule while nothing lasting
        changes."""
        ...

    def preempt_for(self, job: Job, rule: PreemptionRule) -> bool:
        """The shared victim search for one rule: stops victims and holds room, or nothing.
        A search that failed for the job is not made again while nothing lasting changes."""
        ...

    def may_be_victim(self, job: Job, victim: Job, rule: PreemptionRule) -> bool:
        """The universal victim filters and the rule's own (domain.cycle.victims)."""
        ...


class Action(Protocol):
    """A step of the cycle, run in registry order. The cycle's fair shares are recomputed on
    first use: an action calls `state.update_fair_shares()` before it reads a queue's fair
    share or capped demand (domain.decider)."""

    name: str

    def execute(self, cycle: Cycle) -> None: ...


# Another way to make room for a blocked job before preempting anyone (e.g. consolidation).
Resolver = Callable[[Cycle, Job], Outcome | None]


@dataclass(frozen=True)
class PluginSet:
    """The plug-ins one cycle runs with (domain.plugins holds the product's defaults)."""

    queue_policies: Mapping[str, QueuePolicy]
    placements: Mapping[str, PlacementStrategy]
    preemption_rules: Sequence[PreemptionRule]
    resolvers: Sequence[Resolver]
    actions: Sequence[Action]
