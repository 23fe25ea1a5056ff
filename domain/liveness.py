"""Node liveness and timers as the sequencer needs them: what must be journaled, and when (pure).

The journal records what changes the core's view of a node (registration, capacity, labels,
the agent's instance or incarnation, a return after loss); a heartbeat that changes none of
these is not journaled on its own. The sequencer remembers when it last heard each such node
and journals those times in one `NodesAlive` record when the core next has something due, so
the core's heartbeat expiry (`heartbeat_timeout_s` after the last time a node was heard) still
fires exactly when it would have, and replay sees the same times. See docs/scheduler.md.
"""

from __future__ import annotations

from domain.events import NodeHeartbeat
from domain.state import State

__all__ = ["changes_view", "next_due_ts"]


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

    The expiry heap is lazy (it keeps entries that later heartbeats made stale), so this reads
    the nodes themselves; it never changes the state.
    """
    due = state.timers[0][0] if state.timers else None
    timeout_ms = state.cluster.heartbeat_timeout_s * 1000
    for node in state.nodes.values():
        if not node.lost:
            expiry = node.last_heartbeat_ts + timeout_ms
            if due is None or expiry < due:
                due = expiry
    return due
