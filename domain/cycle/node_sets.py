"""Node sets: per node, the least disruptive victim steps that let it hold one more task (pure).

The victim search walks these sets cheapest first (docs/preemption.md, "Cheapest nodes
first"). Costing a node means trying its steps in the cycle's statement and rolling them
back, so the search asks first only for the cheapest set (`cheapest`), found without costing
every node: a node's cost is never below a bound read from its steps alone, so once a costed
node is cheaper than the next bound, no node left can be cheaper. Most searches then need
nothing more; one that does costs every node (`in_order`), as if it had started there.
"""

from __future__ import annotations

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


def in_order(on_node: dict[str, list[VictimStep]], trial: Trial) -> list[list[VictimStep]]:
    """Every node's set that lets it grow, cheapest first."""
    costed = [found for node_id in sorted(on_node) if (found := trial(node_id, on_node[node_id]))]
    costed.sort(key=lambda item: item[0])
    return [chosen for _, chosen in costed]


def cheapest(
    on_node: dict[str, list[VictimStep]],
    trial: Trial,
    order: Callable[[VictimStep], Order],
) -> list[VictimStep] | None:
    """`in_order(on_node, trial)[0]` (None when empty), costing only the nodes that could
    still beat the cheapest found so far.

    A node's trial keeps at least one of the node's own steps (a victim's earlier steps
    only come with it), so it disturbs a priority at least that of the node's first step
    and its costliest step is no cheaper than that step: the node costs at least (that
    step's priority, one step at it, one victim, that step's order, the node), compared as
    costs are. Each node's steps are in least disruption order (`by_node` of sorted steps)."""
    bounds: list[tuple[Cost, str]] = []
    for node_id, node_steps in on_node.items():
        least = order(node_steps[0])
        bounds.append(((least[0], 1, 1, least, node_id), node_id))
    bounds.sort()
    best: tuple[Cost, list[VictimStep]] | None = None
    for bound, node_id in bounds:
        if best is not None and bound > best[0]:
            break  # this node and every one after it costs more than the best found
        found = trial(node_id, on_node[node_id])
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return None if best is None else best[1]
