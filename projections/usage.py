"""Usage over time: change-point series of allocated vs capacity per queue, node and cluster (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.events import (
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JournalRecord,
    NodeHeartbeat,
    NodesAlive,
    Tick,
)
from domain.resources import ZERO, Resources
from domain.state import State

MAX_POINTS = 2000  # change points kept per usage series; older ones are folded into totals


@dataclass(slots=True)
class Series:
    """One usage series as change points (ts, allocated, capacity), with running integrals."""

    points: list[tuple[int, tuple[int, int, int], tuple[int, int, int]]] = field(
        default_factory=list
    )
    allocated_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    capacity_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    since: int | None = None
    integrated_to: int = 0  # the integrals cover [since, integrated_to)

    _last: tuple[Resources, Resources] | None = None

    def sample(self, ts: int, allocated: Resources, capacity: Resources) -> None:
        """Records the values at `ts` if they changed (integrating the previous ones up to it)."""
        last = self._last
        if last is not None:
            # Resources are immutable and replaced on change: identity is the fast path.
            if (last[0] is allocated or last[0] == allocated) and (
                last[1] is capacity or last[1] == capacity
            ):
                return
            _, last_alloc, last_cap = self.points[-1]
            span = ts - self.integrated_to
            if span > 0:
                for r in range(3):
                    self.allocated_ms[r] += last_alloc[r] * span
                    self.capacity_ms[r] += last_cap[r] * span
                self.integrated_to = ts
        else:
            self.since = self.integrated_to = ts
        self._last = (allocated, capacity)
        point = (ts, allocated.as_tuple(), capacity.as_tuple())
        if self.points and self.points[-1][0] == ts:
            self.points[-1] = point
            return
        self.points.append(point)
        if len(self.points) > MAX_POINTS:
            del self.points[: len(self.points) - MAX_POINTS]

    def totals_until(self, ts: int) -> tuple[list[float], list[float]]:
        """Integrals of allocated and capacity (amount x ms) from the first sample to `ts`."""
        allocated, capacity = list(self.allocated_ms), list(self.capacity_ms)
        if self.points:
            _, last_alloc, last_cap = self.points[-1]
            span = max(0, ts - self.integrated_to)
            for r in range(3):
                allocated[r] += last_alloc[r] * span
                capacity[r] += last_cap[r] * span
        return allocated, capacity


def sample(
    state: State,
    ts: int,
    queue_usage: dict[str, Series],
    node_usage: dict[str, Series],
    cluster_usage: Series,
) -> None:
    """Samples every queue's, node's and the cluster's allocation and capacity at `ts`."""
    capacity = state.capacity
    total = ZERO
    for queue_id, queue in state.queues.items():
        series = queue_usage.get(queue_id)
        if series is None:
            series = queue_usage[queue_id] = Series()
        series.sample(ts, queue.subtree_allocated, capacity)
        if queue.parent is None:
            total = total + queue.subtree_allocated  # every job is in some queue's subtree
    for node_id, node in state.nodes.items():
        series = node_usage.get(node_id)
        if series is None:
            series = node_usage[node_id] = Series()
        series.sample(ts, node.allocated, ZERO if node.lost else node.capacity)
    cluster_usage.sample(ts, total, capacity)


def may_change_usage(state: State, record: JournalRecord) -> bool:
    """Whether folding the record may change an allocation or a capacity outside a cycle."""
    event = record.event
    if isinstance(event, JobFinished | JobPreempted | JobCancelled):
        return True
    if isinstance(event, NodeHeartbeat):
        node = state.nodes.get(event.node)
        return node is None or node.lost or node.capacity != event.capacity.to_resources()
    return not isinstance(event, Tick | NodesAlive | JobSubmitted | JobStarted)
