"""The registry of policies, placements, preemption rules and the cycle's actions (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from domain.actions.allocate import Allocate
from domain.actions.settle import Settle
from domain.framework import Action, PreemptionRule, QueuePolicy
from domain.placement import PLACEMENTS, PlacementStrategy
from domain.policies.balance import Balance
from domain.policies.fifo import Fifo
from domain.policies.intelligent import Intelligent
from domain.policies.round_robin import RoundRobin
from domain.session import Outcome, Session
from domain.state import Job

QUEUE_POLICIES: dict[str, QueuePolicy] = {
    "fifo": Fifo(),
    "round_robin": RoundRobin(),
    "balance": Balance(),
    "intelligent": Intelligent(),
}

# Tried in order for a job that cannot be placed; the first that starts a preemption wins.
PREEMPTION_RULES: list[PreemptionRule] = []

# Other ways to make room for a blocked job before preempting anyone (e.g. consolidation).
Resolver = Callable[[Session, Job], Outcome | None]
RESOLVERS: list[Resolver] = []

ACTIONS: list[Action] = [Settle(), Allocate()]


@dataclass(frozen=True)
class Plugins:
    queue_policies: Mapping[str, QueuePolicy] = field(default_factory=lambda: QUEUE_POLICIES)
    placements: Mapping[str, PlacementStrategy] = field(default_factory=lambda: PLACEMENTS)
    preemption_rules: Sequence[PreemptionRule] = field(default_factory=lambda: PREEMPTION_RULES)
    resolvers: Sequence[Resolver] = field(default_factory=lambda: RESOLVERS)
    actions: Sequence[Action] = field(default_factory=lambda: ACTIONS)


DEFAULT_PLUGINS = Plugins()
