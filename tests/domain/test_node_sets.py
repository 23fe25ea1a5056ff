"""The victim search's cheapest node set, found without costing every node (pure seam: the trial)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.cycle import node_sets
from domain.cycle.room import VictimStep


def _steps(victims: list[tuple[int, int, list[list[str]]]]) -> list[VictimStep]:
    """Per victim (priority, recent, nodes of each of its steps): its steps, shrinks first."""
    steps = []
    for number, (priority, recent, nodes) in enumerate(victims):
        victim: Any = SimpleNamespace(id=f"v{number}", priority=priority, recent=recent)
        for index, step_nodes in enumerate(nodes):
            shrink = index < len(nodes) - 1
            steps.append(VictimStep(victim, tuple((n, 1) for n in step_nodes), shrink, index))
    return steps


def _order_of_steps(steps: list[VictimStep]) -> Any:
    def order(step: VictimStep) -> node_sets.Order:
        victim: Any = step.victim  # a stand-in with `recent` (see _steps), not a Job
        return (victim.priority, 0 if step.shrink else 1, victim.recent, victim.id, step.index)

    return order


def _trial(
    steps: list[VictimStep], plans: dict[str, tuple[bool, int, frozenset[str]]], calls: list[str]
) -> node_sets.Trial:
    """A trial as the search's: takes the node's first steps, each with its victim's earlier
    steps, skips forbidden victims, and costs what it kept; `plans` says per node whether it
    grows, after how many steps, and which victims the rule forbids."""
    every = {(step.victim.id, step.index): step for step in steps}
    order = _order_of_steps(steps)

    def trial(
        node_id: str, node_steps: list[VictimStep]
    ) -> tuple[node_sets.Cost, list[VictimStep]] | None:
        calls.append(node_id)
        grows, count, forbidden = plans.get(node_id, (False, 0, frozenset()))
        chosen: list[VictimStep] = []
        for step in node_steps[: count + 1]:
            if step.victim.id in forbidden:
                continue
            for index in range(step.index + 1):
                earlier = every[(step.victim.id, index)]
                if earlier not in chosen:
                    chosen.append(earlier)
        if not grows or not chosen:
            return None
        orders = [order(step) for step in chosen]
        top = max(o[0] for o in orders)
        at_top = sum(1 for o in orders if o[0] == top)
        victims = len({step.victim.id for step in chosen})
        return (top, at_top, victims, max(orders), node_id), chosen

    return trial


NODES = ["n0", "n1", "n2", "n3", "n4"]
victim_lists = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.integers(-3, 0),
        st.lists(
            st.lists(st.sampled_from(NODES), min_size=1, max_size=2, unique=True),
            min_size=1,
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=8,
)
plan_maps = st.dictionaries(
    st.sampled_from(NODES),
    st.tuples(
        st.booleans(),
        st.integers(0, 3),
        st.frozensets(st.sampled_from([f"v{i}" for i in range(8)])),
    ),
)


def _every_node_costed(
    on_node: dict[str, list[VictimStep]], trial: node_sets.Trial
) -> list[list[VictimStep]]:
    """The reference order: every node costed, each set that lets its node grow, cheapest
    first (what the search walked before `cheapest` and `Ranking` costed only some)."""
    costed = [found for node_id in sorted(on_node) if (found := trial(node_id, on_node[node_id]))]
    costed.sort(key=lambda item: item[0])
    return [chosen for _, chosen in costed]


def _every_set(
    victims: list[tuple[int, int, list[list[str]]]],
    plans: dict[str, tuple[bool, int, frozenset[str]]],
) -> tuple[list[VictimStep], Any, dict[str, list[VictimStep]], list[list[VictimStep]]]:
    """The steps in least disruption order, that order, the steps per node, and every
    node's set ranked with every node costed (`_every_node_costed`)."""
    steps = _steps(victims)
    order = _order_of_steps(steps)
    steps.sort(key=order)
    on_node = node_sets.by_node(steps)
    return steps, order, on_node, _every_node_costed(on_node, _trial(steps, plans, []))


@settings(max_examples=400)
@given(victims=victim_lists, plans=plan_maps)
def test_the_cheapest_set_is_the_first_of_all_sets_in_order(
    victims: list[tuple[int, int, list[list[str]]]],
    plans: dict[str, tuple[bool, int, frozenset[str]]],
) -> None:
    steps, order, on_node, every = _every_set(victims, plans)
    lazy_calls: list[str] = []
    found = node_sets.cheapest(on_node, _trial(steps, plans, lazy_calls), order)
    assert found == (every[0] if every else None)
    assert len(lazy_calls) == len(set(lazy_calls)) <= len(on_node)


def _cheapest(
    victims: list[tuple[int, int, list[list[str]]]],
    plans: dict[str, tuple[bool, int, frozenset[str]]],
) -> tuple[list[str] | None, list[str]]:
    """The victims of the cheapest set, and the nodes costed to find it, in order."""
    steps = _steps(victims)
    order = _order_of_steps(steps)
    steps.sort(key=order)
    calls: list[str] = []
    found = node_sets.cheapest(node_sets.by_node(steps), _trial(steps, plans, calls), order)
    return (None if found is None else [step.victim.id for step in found]), calls


def test_a_node_that_cannot_beat_the_cheapest_found_is_never_costed() -> None:
    # Given v0 (priority 0) alone on n0, enough for it, and v1 (priority 1) alone on n1
    victims = [(0, 0, [["n0"]]), (1, 0, [["n1"]])]
    plans: dict[str, tuple[bool, int, frozenset[str]]] = {
        "n0": (True, 0, frozenset()),
        "n1": (True, 0, frozenset()),
    }
    # When the cheapest set is asked for
    found, costed = _cheapest(victims, plans)
    # Then it is v0's, and n1, whose every step disturbs priority 1, was never tried
    assert found == ["v0"]
    assert costed == ["n0"]


def test_a_forbidden_first_victim_sends_the_search_to_the_next_node() -> None:
    # Given n0 whose only victim the rule forbids, and n1 with a victim of higher priority
    victims = [(0, 0, [["n0"]]), (1, 0, [["n1"]])]
    plans = {"n0": (True, 0, frozenset({"v0"})), "n1": (True, 0, frozenset())}
    # When the cheapest set is asked for
    found, costed = _cheapest(victims, plans)
    # Then n0 is tried first (it might have been cheaper), and n1's set is the answer
    assert found == ["v1"]
    assert costed == ["n0", "n1"]


def test_a_node_disturbing_one_victim_beats_an_earlier_node_that_needs_two() -> None:
    # Given n0 that needs v0 (priority 0) and then v1 (priority 1) to grow, and n1 that
    # needs only v2 (priority 1, started after v1)
    victims = [(0, 0, [["n0"]]), (1, -3, [["n0"]]), (1, 0, [["n1"]])]
    plans: dict[str, tuple[bool, int, frozenset[str]]] = {
        "n0": (True, 1, frozenset()),
        "n1": (True, 0, frozenset()),
    }
    # When the cheapest set is asked for
    found, costed = _cheapest(victims, plans)
    # Then n1 is still tried after n0's set was costed, and its one victim wins
    assert found == ["v2"]
    assert costed == ["n0", "n1"]


@settings(max_examples=400)
@given(victims=victim_lists, plans=plan_maps, asks=st.lists(st.integers(1, 6), max_size=4))
def test_a_ranking_asked_bit_by_bit_gives_every_set_in_order(
    victims: list[tuple[int, int, list[list[str]]]],
    plans: dict[str, tuple[bool, int, frozenset[str]]],
    asks: list[int],
) -> None:
    steps, order, on_node, every = _every_set(victims, plans)
    calls: list[str] = []
    ranking = node_sets.Ranking(on_node, order)
    for count in asks:
        assert ranking.first(count, _trial(steps, plans, calls)) == every[:count]
    assert ranking.first(len(on_node), _trial(steps, plans, calls)) == every
    assert ranking.complete and ranking.ranked == len(every)
    assert len(calls) == len(set(calls)) <= len(on_node)  # each node costed once at most
