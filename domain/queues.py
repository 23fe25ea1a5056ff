"""A queue as the state holds it: its configuration, pending jobs and what it holds (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.events import QueueConfigured
from domain.indexes import PendingIndex
from domain.quota import QuotaSpec
from domain.resources import ZERO, Resources
from domain.wire_types import PreemptionRules, QueuePolicyConfig


@dataclass(slots=True)
class Queue:
    id: str
    parent: str | None
    priority: int
    quota: QuotaSpec
    policy: QueuePolicyConfig
    preemption: PreemptionRules
    config: QueueConfigured
    children: list[str] = field(default_factory=list)
    pending: PendingIndex = field(default_factory=PendingIndex)
    running: set[str] = field(default_factory=set)  # jobs holding resources (incl. stopping)
    allocated: Resources = ZERO  # this queue's own jobs
    subtree_allocated: Resources = ZERO  # own jobs and every descendant's
    demand: Resources = ZERO  # own jobs' full requests, pending or holding resources
    jobs: int = 0  # own jobs not yet ended
    fair_share: tuple[float, float, float] = (0.0, 0.0, 0.0)  # whole subtree
    own_fair_share: tuple[float, float, float] = (0.0, 0.0, 0.0)  # own jobs, as a virtual child
    capped_demand: tuple[float, float, float] = (0.0, 0.0, 0.0)  # subtree demand within limits
    stopping: Resources = ZERO  # own jobs' tasks told to stop, still in `allocated`
    held: Resources = ZERO  # freed by preemptions for own pending jobs (reclaim counts it)
    protected: Resources = ZERO  # own non-preemptible jobs' allocation: must stay within quota
    stopped_by: str | None = None  # the job that stopped this queue in the last cycle
    stopped_policy: str | None = None  # the policy kind whose verdict stopped it (for views)
    # Per resource, at most the per-task request of every job in `running` (None: not known
    # yet): lowered by Allocations.place, never raised, so a bound and no exact minimum.
    # The victim search skips a queue whose room is below it. Derived, never saved.
    least_task: Resources | None = field(default=None, compare=False)
    # Per node, what this queue's preemptible, non-interactive jobs have placed there (tasks
    # being stopped not counted; None: not known yet): kept by Allocations, so that the
    # victim search can bound the room its candidate queues could free without listing
    # their jobs (Room.most_if_emptied). Derived, never saved.
    stoppable_on: dict[str, Resources] | None = field(default=None, compare=False)
