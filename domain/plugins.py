"""The registry: queue policies, placements, preemption rules, resolvers and the cycle's actions (pure).

Every plug-in names itself (a policy's `kind`, a rule's `reason`) and carries its own
explanations and flags, so registering one here is all it takes for the cycle, the pending
view and explain to use it (docs/architecture.md shows a worked example).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from domain.actions.allocate import Allocate
from domain.actions.claim import Claim
from domain.actions.consolidate import consolidate
from domain.actions.expand import Expand
from domain.actions.reclaim_again import ReclaimAgain
from domain.actions.reclaim_moves import reclaim_with_moves
from domain.actions.settle import Settle
from domain.cycle.framework import Action, PluginSet, PreemptionRule, QueuePolicy, Resolver
from domain.placement import PLACEMENTS, PlacementStrategy
from domain.policies.balance import Balance
from domain.policies.fifo import Fifo
from domain.policies.intelligent import Intelligent
from domain.policies.round_robin import RoundRobin
from domain.reasons import CORE_STOP_REASONS
from domain.rules.child_level import ChildLevel
from domain.rules.interactive import Interactive
from domain.rules.priority import WithinQueuePriority
from domain.rules.reclaim import Reclaim
from domain.rules.reclaim_deserved import ReclaimDeserved
from domain.rules.self_level import SelfLevel
from domain.wire_types import POLICY_KINDS


def _by_kind(*policies: QueuePolicy) -> dict[str, QueuePolicy]:
    return {policy.kind: policy for policy in policies}


QUEUE_POLICIES: dict[str, QueuePolicy] = _by_kind(Fifo(), RoundRobin(), Balance(), Intelligent())

# Tried in order for a job that cannot be placed; the first that starts a preemption wins.
PREEMPTION_RULES: list[PreemptionRule] = [
    Reclaim(),  # others' over-fair-share work first, sparing the queue's own (docs/quotas.md)
    ReclaimDeserved(),  # section 6's fallback: from queues above their deserved quota
    Interactive(),
    WithinQueuePriority(),  # within one queue before reaching into others' (docs/preemption.md)
    SelfLevel(),
    ChildLevel(),
]

# Other ways to make room for a blocked job before preempting anyone (e.g. consolidation).
# Both act only when ClusterConfigured.consolidation; reclaim_with_moves after plain moves.
RESOLVERS: list[Resolver] = [consolidate, reclaim_with_moves]

ACTIONS: list[Action] = [Settle(), Claim(), Allocate(), ReclaimAgain(), Expand()]


@dataclass(frozen=True)
class Plugins(PluginSet):
    """The product's plug-ins by default; a test or benchmark replaces what it needs."""

    queue_policies: Mapping[str, QueuePolicy] = field(default_factory=lambda: QUEUE_POLICIES)
    placements: Mapping[str, PlacementStrategy] = field(default_factory=lambda: PLACEMENTS)
    preemption_rules: Sequence[PreemptionRule] = field(default_factory=lambda: PREEMPTION_RULES)
    resolvers: Sequence[Resolver] = field(default_factory=lambda: RESOLVERS)
    actions: Sequence[Action] = field(default_factory=lambda: ACTIONS)


DEFAULT_PLUGINS = Plugins()


def validation_context(plugins: PluginSet = DEFAULT_PLUGINS) -> dict[str, object]:
    """What validating input needs from the registry: the registered queue policy names."""
    return {POLICY_KINDS: tuple(plugins.queue_policies)}


def preemption_explanations(plugins: PluginSet = DEFAULT_PLUGINS) -> dict[str, str]:
    """What each Preempt reason means: every registered rule's own words, then the core's."""
    explained: dict[str, str] = {}
    for rule in plugins.preemption_rules:  # rules sharing a reason: their words joined
        known = explained.get(rule.reason)
        explained[rule.reason] = rule.explains if known is None else f"{known}; {rule.explains}"
    for reason, text in CORE_STOP_REASONS.items():
        explained.setdefault(reason, text)
    return explained
