"""Free room of the live nodes each asked node selector matches, kept as nodes change (pure).

Consolidation and reclaim with moves first ask whether the free room of the nodes a job may
use could hold it at all. For a job with a node selector that sum read every node, once per
try and once per victim a plan took, so a cluster's size set the cost of every such try.
The node index keeps the sum for each selector asked (`NodeIndex.free_matching`) and
refiles a node in each whenever it refiles the node itself: every change to a node's room,
labels or liveness ends there, a statement's rollback included. Derived, never saved: a
loaded index asks again. At most `SELECTORS_KEPT` selectors are kept; past that they are
all dropped and each summed again when next asked, which gives the same sums.
"""

from __future__ import annotations

from collections.abc import Mapping

from domain.entities import Node, Selector
from domain.resources import Resources

FreeKey = tuple[int, int, int, str]  # a live node's free gpu, cpu, memory and id, as filed
SELECTORS_KEPT = 64


class _Room:
    """The matching live nodes' free room, each node counted at zero or more."""

    __slots__ = ("counted", "total")

    def __init__(self) -> None:
        self.counted: dict[str, tuple[int, int, int]] = {}
        self.total = [0, 0, 0]

    def refile(self, node_id: str, key: FreeKey | None) -> None:
        """Counts the node at `key` (None: not at all, as a lost or unmatched node)."""
        old = self.counted.pop(node_id, None)
        total = self.total
        if old is not None:
            total[0] -= old[0]
            total[1] -= old[1]
            total[2] -= old[2]
        if key is not None:
            new = (max(0, key[0]), max(0, key[1]), max(0, key[2]))
            self.counted[node_id] = new
            total[0] += new[0]
            total[1] += new[1]
            total[2] += new[2]


class SelectorRooms:
    """Per node selector asked, the free room of the live nodes it matches."""

    __slots__ = ("_rooms",)

    def __init__(self) -> None:
        self._rooms: dict[Selector, _Room] = {}

    def free(
        self, selector: Selector, filed: Mapping[str, FreeKey], nodes: Mapping[str, Node]
    ) -> Resources:
        """What the live nodes (`filed`: each with its free room) matching `selector` have
        free; summed over them once, then kept by `refile` and `forget`."""
        room = self._rooms.get(selector)
        if room is None:
            if len(self._rooms) >= SELECTORS_KEPT:
                self._rooms.clear()
            room = self._rooms[selector] = _Room()
            for node_id, key in filed.items():
                if nodes[node_id].matches(selector):
                    room.refile(node_id, key)
        total = room.total
        return Resources(total[0], total[1], total[2])

    def kept(self) -> list[Selector]:
        """The selectors whose free room is kept now (for checks)."""
        return sorted(self._rooms)

    def refile(self, node: Node, key: FreeKey) -> None:
        """The live node is filed at `key` now (its labels may have changed too)."""
        for selector, room in self._rooms.items():
            room.refile(node.id, key if node.matches(selector) else None)

    def forget(self, node_id: str) -> None:
        """The node left the index (lost)."""
        for room in self._rooms.values():
            room.refile(node_id, None)
