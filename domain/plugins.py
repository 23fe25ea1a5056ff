"""The registry of policies, placements, preemption rules and the cycle's actions (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from domain.actions.allocate import Allocate
from domain.actions.claim import Claim
from domain.actions.consolidate import consolidate
from domain.actions.expand import Expand
from domain.actions.settle import Settle
from domain.framework import Action, PreemptionRule, QueuePolicy
from domain.placement import PLACEMENTS, PlacementStrategy
from domain.policies.balance import Balance
from domain.policies.fifo import Fifo
from domain.policies.intelligent import Intelligent
from domain.policies.round_robin import RoundRobin
from domain.rules.child_level import ChildLevel
from domain.rules.interactive import Interactive
from domain.rules.priority import WithinQueuePriority
from domain.rules.reclaim import Reclaim
from domain.rules.self_level import SelfLevel
from domain.session import Outcome, Session
from domain.state import Job

QUEUE_POLICIES: dict[str, QueuePolicy] = {
    "fifo": Fifo(),
    "round_robin": RoundRobin(),
    "balance": Balance(),
    "intelligent": Intelligent(),
}

# Tried in order for a job that cannot be placed; the first that starts a preemption wins.
PREEMPTION_RULES: list[PreemptionRule] = [
    Reclaim(),  # others' over-fair-share work first, sparing the queue's own (docs/quotas.md)
    Interactive(),
    WithinQueuePriority(),  # within one queue before reaching into others' (docs/preemption.md)
    SelfLevel(),
    ChildLevel(),
]

# Other ways to make room for a blocked job before preempting anyone (e.g. consolidation).
Resolver = Callable[[Session, Job], Outcome | None]
RESOLVERS: list[Resolver] = [consolidate]  # acts only when ClusterConfigured.consolidation

ACTIONS: list[Action] = [Settle(), Claim(), Allocate(), Expand()]


@dataclass(frozen=True)
class Plugins:
    queue_policies: Mapping[str, QueuePolicy] = field(default_factory=lambda: QUEUE_POLICIES)
    placements: Mapping[str, PlacementStrategy] = field(default_factory=lambda: PLACEMENTS)
    preemption_rules: Sequence[PreemptionRule] = field(default_factory=lambda: PREEMPTION_RULES)
    resolvers: Sequence[Resolver] = field(default_factory=lambda: RESOLVERS)
    actions: Sequence[Action] = field(default_factory=lambda: ACTIONS)


DEFAULT_PLUGINS = Plugins()
