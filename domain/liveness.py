"""Node liveness and timers as the sequencer needs them: what must be journaled, and when (pure).

The journal records what changes the core's view of a node (registration, capacity, labels,
the agent's instance or incarnation, a return after loss); a heartbeat that changes none of
these is not journaled on its own. The sequencer remembers when it last heard each such node
and journals those times in one `NodesAlive` record when the core next has something due, so
the core's heartbeat expiry (`heartbeat_timeout_s` after the last time a node was heard) still
fires exactly when it would have, and replay sees the same times. See docs/scheduler.md.

`LivenessTracker` is that memory: the sequencer keeps one (streams/), and the synthetic
journal of the benchmarks (projections/synthetic.py) keeps one too, so both write the same
`NodesAlive` records at the same times.
"""

from __future__ import annotations

import heapq

from domain.events import NodeHeartbeat, NodesAlive
from domain.limits import NODES_ALIVE_MAX
from domain.state import State

__all__ = ["LivenessTracker", "changes_view", "file_deadline", "next_due_ts"]

EXPIRIES = "live_node_expiries"  # configuration memo: _LiveExpiries


def changes_view(state: State, event: NodeHeartbeat) -> bool:
    """Whether journaling this (admitted) heartbeat changes anything the core sees but time."""
    node = state.nodes.get(event.node)
    if node is None or node.lost:
        return True  # a registration, or a return after loss
    return (
        node.capacity != event.capacity.to_resources()
        or node.labels != event.labels
        or node.instance != event.instance
        or node.incarnation != (event.incarnation or 0)
    )


def next_due_ts(state: State) -> int | None:
    """The earliest ts at which the core has something due: a live node's heartbeat expiry or
    a policy timer. None when nothing is due ever (no live node, no timer).

    The sequencer asks it for every batch. The core's own expiry heap keeps the entries that
    later heartbeats made stale until they fall due (each then triggers a cycle, so it must
    stay as it is), so the earliest live deadline is read from a derived heap instead
    (`_LiveExpiries`): amortised, each heartbeat's entry is pushed and dropped once, and a
    batch no longer reads every node. Only that derived memo changes, never the state.
    """
    due = state.timers[0][0] if state.timers else None
    expiry = _expiries(state).earliest(state)
    if expiry is not None and (due is None or expiry < due):
        due = expiry
    return due


def file_deadline(state: State, node_id: str, deadline: int) -> None:
    """The fold files a live node's new heartbeat deadline (after it set the node's last
    heartbeat): in the core's heap of expiries, and in the derived heap of live deadlines,
    if one was made."""
    heapq.heappush(state.heartbeat_expiry, (deadline, node_id))
    expiries = state.configuration_memo.get(EXPIRIES)
    if isinstance(expiries, _LiveExpiries):
        heapq.heappush(expiries.heap, (deadline, node_id))


class _LiveExpiries:
    """Each live node's heartbeat deadline (last heard + timeout), earliest first. Entries
    that a later heartbeat or a loss made stale are dropped when they reach the top. Kept
    with the configuration (which sets the timeout), never saved: made again from the nodes
    after a restore or a configuration change."""

    __slots__ = ("heap", "timeout_ms")

    def __init__(self, state: State) -> None:
        self.timeout_ms = state.cluster.heartbeat_timeout_s * 1000
        self.heap = [
            (node.last_heartbeat_ts + self.timeout_ms, node.id)
            for node in state.nodes.values()
            if not node.lost
        ]
        heapq.heapify(self.heap)

    def earliest(self, state: State) -> int | None:
        heap, nodes, timeout_ms = self.heap, state.nodes, self.timeout_ms
        while heap:
            deadline, node_id = heap[0]
            node = nodes.get(node_id)
            if (
                node is not None
                and not node.lost
                and node.last_heartbeat_ts + timeout_ms == deadline
            ):
                return deadline
            heapq.heappop(heap)  # stale: heard again since, or lost
        return None


def _expiries(state: State) -> _LiveExpiries:
    memo = state.configuration_memo
    expiries = memo.get(EXPIRIES)
    if expiries is None:
        expiries = memo[EXPIRIES] = _LiveExpiries(state)
    assert isinstance(expiries, _LiveExpiries)
    return expiries


class LivenessTracker:
    """Heartbeats heard but not journaled: node -> the ts of the batch it was last heard in.

    A heartbeat that changes nothing the core sees but time is not journaled (`changes_view`);
    the tracker keeps the batch ts it arrived at, per node. Those times go into the journal as
    `NodesAlive` records at the head of a batch when either
    - the core has something due (a heartbeat expiry or a timer, `next_due_ts`) by the batch's
      ts, so its cycle sees every node's last heartbeat exactly as if each had been journaled; or
    - a node heard has less than half its `heartbeat_timeout_s` left on the journal's clock, so
      the journal always gives every live node at least that much time: a scheduler that
      restarts (and forgets what it heard) within half the timeout loses no live node.
    The tracker holds no state the journal needs beyond that. See docs/scheduler.md, Liveness.
    """

    def __init__(self) -> None:
        self.heard: dict[str, int] = {}
        self._refresh_at: int | None = None  # when the earliest heard node's lease is half gone

    def absorb(self, state: State, event: NodeHeartbeat, ts: int) -> bool:
        """True when the (admitted) heartbeat needs no journal record of its own: it is noted."""
        if changes_view(state, event):
            self.heard.pop(event.node, None)  # the journaled heartbeat says more, and later
            return False
        self.heard[event.node] = ts
        refresh = _refresh_at(state, event.node)
        if self._refresh_at is None or refresh < self._refresh_at:
            self._refresh_at = refresh
        return True

    def refresh_at(self) -> int | None:
        """When the tracker must journal what it heard even if the core has nothing due."""
        return self._refresh_at if self.heard else None

    def due(self, state: State, ts: int, core_due: int | None = None) -> list[NodesAlive]:
        """The records to journal at the head of a batch at `ts` (none when not due). The
        tracker keeps them until `committed` says the journal has them, so an aborted
        transaction loses no heartbeat. `core_due` is `next_due_ts(state)` when the caller
        has it already."""
        if not self.heard:
            return []
        if core_due is None:
            core_due = next_due_ts(state)
        refresh = self.refresh_at()
        if (core_due is None or core_due > ts) and (refresh is None or refresh > ts):
            return []
        nodes = sorted(self.heard)
        return [
            NodesAlive(seen={node: self.heard[node] for node in nodes[i : i + NODES_ALIVE_MAX]})
            for i in range(0, len(nodes), NODES_ALIVE_MAX)
        ]

    def committed(self, state: State, records: list[NodesAlive]) -> None:
        """These records are in the journal: forget what they say (unless heard again since)."""
        if not records:
            return
        for record in records:
            for node, ts in record.seen.items():
                if self.heard.get(node) == ts:
                    del self.heard[node]
        self._refresh_at = min(
            (_refresh_at(state, node) for node in self.heard if node in state.nodes),
            default=None,
        )


def _refresh_at(state: State, node_id: str) -> int:
    """Half-way through the node's lease on the journal's clock."""
    timeout_ms = state.cluster.heartbeat_timeout_s * 1000
    return state.nodes[node_id].last_heartbeat_ts + timeout_ms - timeout_ms // 2
