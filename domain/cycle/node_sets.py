"""Node sets: per node, the least disruptive victim steps that let it hold one more task (pure).

The victim search walks these sets cheapest first (docs/preemption.md, "Cheapest nodes
first"). Costing a node means trying its steps in the cycle's statement and rolling them
back, so the search asks first only for the cheapest set (`cheapest`), found without costing
every node: a node's cost is never below a bound read from its steps alone, so once a costed
node is cheaper than the next bound, no node left can be cheaper. Most searches then need
nothing more; one that does asks for the cheapest few, then more (`Ranking`), each time
costing only the nodes that could be among them, in the order costing every node would give.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from domain.cycle.room import VictimStep

# (highest priority disturbed, steps at it, victims, costliest step, node): lower is cheaper.
Cost = tuple[object, ...]
Order = tuple[int, int, int, str, int]  # VictimSearch.step_order
# Costs a node's steps from the state as it is, or None when they cannot let it grow.
Trial = Callable[[str, list[VictimStep]], tuple[Cost, list[VictimStep]] | None]


def by_node(steps: list[VictimStep]) -> dict[str, list[VictimStep]]:
    """Per node, the steps that free room on it, in the order given (least disruption)."""
    on_node: dict[str, list[VictimStep]] = {}
    for step in steps:
        for node_id, _ in step.nodes:
            on_node.setdefault(node_id, []).append(step)
    return on_node


def cheapest(
    on_node: dict[str, list[VictimStep]],
    trial: Trial,
    order: Callable[[VictimStep], Order],
) -> list[VictimStep] | None:
    """The cheapest node's set (None when no node's set lets it grow), costing only the
    nodes that could still beat the cheapest found so far (`Ranking`)."""
    first = Ranking(on_node, order).first(1, trial)
    return first[0] if first else None


class Ranking:
    """Every node's set that lets it grow, cheapest first (by its trial's cost), ranked only
    as far as asked: the cheapest `count` sets cost only the nodes whose bound is below the
    last of them.

    A node's trial keeps at least one of the node's own steps (a victim's earlier steps
    only come with it), so it disturbs a priority at least that of the node's first step
    and its costliest step is no cheaper than that step: the node costs at least (that
    step's priority, one step at it, one victim, that step's order, the node), compared as
    costs are (and never equal to another node's: the node is last). So a costed node
    cheaper than every bound not costed yet is the next in order. Each node's steps are in
    least disruption order (`by_node` of sorted steps). Every trial must see the state the
    ranking began with: a caller that changed it between two asks rolls it back first."""

    def __init__(self, on_node: dict[str, list[VictimStep]], order: Callable[[VictimStep], Order]):
        self._on_node = on_node
        bounds: list[tuple[Cost, str]] = []
        for node_id, node_steps in on_node.items():
            least = order(node_steps[0])
            bounds.append(((least[0], 1, 1, least, node_id), node_id))
        bounds.sort()
        self._bounds = bounds
        self._next = 0  # the next bound not costed yet
        self._costed: list[tuple[Cost, list[VictimStep]]] = []  # a heap, cheapest first
        self._ranked: list[list[VictimStep]] = []

    @property
    def complete(self) -> bool:
        """Whether every node is ranked (or found unable to grow)."""
        return self._next == len(self._bounds) and not self._costed

    @property
    def ranked(self) -> int:
        """How many sets are ranked so far."""
        return len(self._ranked)

    def first(self, count: int, trial: Trial) -> list[list[VictimStep]]:
        """The cheapest `count` sets (all of them, when fewer), cheapest first."""
        bounds, costed = self._bounds, self._costed
        while len(self._ranked) < count:
            while self._next < len(bounds) and (not costed or bounds[self._next][0] < costed[0][0]):
                node_id = bounds[self._next][1]
                self._next += 1
                found = trial(node_id, self._on_node[node_id])
                if found is not None:
                    heapq.heappush(costed, found)
            if not costed:
                break
            self._ranked.append(heapq.heappop(costed)[1])
        return self._ranked[:count]
