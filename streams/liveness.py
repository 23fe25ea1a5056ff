"""What the sequencer heard from nodes but did not journal, until the core needs it (I/O shell).

A heartbeat that changes nothing the core sees but time is not journaled (domain/liveness.py);
the tracker keeps the batch ts it arrived at, per node. When the core next has something due
(a heartbeat expiry or a timer, `next_due_ts`) at or before a batch's ts, those times go into
the journal first, as `NodesAlive` records of that batch, so the core's view of every node's
last heartbeat is exactly what it would have been had each heartbeat been journaled. The
tracker holds no state the journal needs: losing it (a restart) can only make a node look
silent for as long as its agent stays silent. See docs/scheduler.md, Liveness.
"""

from __future__ import annotations

from domain.events import NodeHeartbeat, NodesAlive
from domain.limits import NODES_ALIVE_MAX
from domain.liveness import changes_view, next_due_ts
from domain.state import State

__all__ = ["LivenessTracker"]


class LivenessTracker:
    """Heartbeats heard but not journaled: node -> the ts of the batch it was last heard in."""

    def __init__(self) -> None:
        self.heard: dict[str, int] = {}

    def absorb(self, state: State, event: NodeHeartbeat, ts: int) -> bool:
        """True when the (admitted) heartbeat needs no journal record of its own: it is noted."""
        if changes_view(state, event):
            self.heard.pop(event.node, None)  # the journaled heartbeat says more, and later
            return False
        self.heard[event.node] = ts
        return True

    def due(self, state: State, ts: int) -> list[NodesAlive]:
        """The records to journal before a batch at `ts`: none unless the core has something
        due by then. The tracker keeps them until `committed` says the journal has them, so an
        aborted transaction loses no heartbeat."""
        if not self.heard:
            return []
        due = next_due_ts(state)
        if due is None or due > ts:
            return []
        nodes = sorted(self.heard)
        records = [
            NodesAlive(seen={node: self.heard[node] for node in nodes[i : i + NODES_ALIVE_MAX]})
            for i in range(0, len(nodes), NODES_ALIVE_MAX)
        ]
        return records

    def committed(self, records: list[NodesAlive]) -> None:
        """These records are in the journal: forget what they say (unless heard again since)."""
        for record in records:
            for node, ts in record.seen.items():
                if self.heard.get(node) == ts:
                    del self.heard[node]
