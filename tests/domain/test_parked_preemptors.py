"""A preemptor waiting for its victims is passed over cycle after cycle, yet placed as soon as
room it could use appears anywhere (given / when / then; domain/cycle/parked.py)."""

from __future__ import annotations

from typing import Any

from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_waiting_preemptor_fit import counting_placements

ZONE_X: dict[str, Any] = {"labels": {"zone": "x"}}
ZONE_Y: dict[str, Any] = {"labels": {"zone": "y"}}


def preemptor_started(**high: Any) -> Cluster:
    """`high` (one 4-GPU task) preempted `low` on n0 (zone x) at 1000; `keeper`, which it may
    not preempt, runs alone on n1 (8 GPUs, zone y)."""
    cluster = Cluster()
    cluster.given(
        0,
        queue("q", gpu_quota=12, preemption={"within_queue": True}),
        node("n0", gpu=4, **ZONE_X),
        node("n1", gpu=8, **ZONE_Y),
    )
    cluster.given(0, job("low", "q", gpu=4, priority=1), job("keeper", "q", gpu=8, priority=9))
    cluster.agents_obey()
    cluster.given(1000, job("high", "q", gpu=4, priority=5, **high))
    assert cluster.preempted(cluster.commands) == ["low"]
    return cluster


def preemptor_waiting(**high: Any) -> Cluster:
    """`high` (one 4-GPU task) preempted `low` on n0 (zone x) and waits for it to stop,
    through two more cycles, each for a job of 8 GPUs in zone x, which fits nowhere; `keeper`,
    which it may not preempt, runs alone on n1 (8 GPUs, zone y)."""
    cluster = preemptor_started(**high)
    # Two more cycles, which pass it over (parked when its preemption started).
    cluster.given(2000, job("wide", "q", gpu=8, priority=1, node_selector={"zone": "x"}))
    cluster.given(3000, job("wider", "q", gpu=8, priority=1, node_selector={"zone": "x"}))
    return cluster


def test_a_preemptor_is_passed_over_from_the_cycle_after_its_preemption_started() -> None:
    # Given `high` preempting `low` on n0, in the cycle that folds it
    cluster = preemptor_started()
    searched, counting = counting_placements()

    # When, in the next cycle, a job arrives that fits nowhere
    with counting:
        cluster.when(2000, job("wide", "q", gpu=8, priority=1, node_selector={"zone": "x"}))

    # Then only the new job is searched for: the preemptor, parked when its preemption
    # started, is passed over, still waiting for its victim
    assert searched == ["wide"]
    assert cluster.last == []
    assert cluster.job_view("high").awaiting == ("low",)


def test_preemptors_started_together_are_all_passed_over_in_the_next_cycle() -> None:
    # Given two preemptors started in one cycle, each stopping a victim on its own node:
    # each stop notes its node, which the first to be parked must not take for growth
    cluster = Cluster()
    cluster.given(
        0,
        queue("q", gpu_quota=16, preemption={"within_queue": True}),
        node("n0", gpu=4, **ZONE_X),
        node("n1", gpu=8, **ZONE_Y),
        node("n2", gpu=4, **ZONE_X),
    )
    cluster.given(
        0,
        job("low0", "q", gpu=4, priority=1),
        job("low2", "q", gpu=4, priority=1),
        job("keeper", "q", gpu=8, priority=9),
    )
    cluster.agents_obey()
    cluster.given(1000, job("high", "q", gpu=4, priority=5), job("high2", "q", gpu=4, priority=5))
    assert sorted(cluster.preempted(cluster.commands)) == ["low0", "low2"]
    searched, counting = counting_placements()

    # When, in the next cycle, a job arrives that fits nowhere
    with counting:
        cluster.when(2000, job("wide", "q", gpu=8, priority=1, node_selector={"zone": "x"}))

    # Then neither preemptor is searched for again
    assert searched == ["wide"]
    assert cluster.last == []


def test_a_waiting_preemptor_takes_room_freed_on_another_node_at_once() -> None:
    # Given a preemptor waiting for its victim on n0, passed over by the last cycles
    cluster = preemptor_waiting()

    # When the job on n1 ends, freeing 8 GPUs there
    cluster.finish(4000, "keeper")

    # Then the preemptor runs on n1 in that cycle
    assert [(c.job, c.node) for c in cluster.last if c.type == "Dispatch"] == [("high", "n1")]


def test_a_waiting_preemptor_is_not_placed_on_room_its_selector_excludes() -> None:
    # Given a preemptor for zone x waiting for its victim on n0 (zone x)
    cluster = preemptor_waiting(node_selector={"zone": "x"})
    waiting_for = cluster.reason("high")

    # When the job on n1, in zone y, ends
    cluster.finish(4000, "keeper")

    # Then the preemptor still waits for its victim, for the same reason
    assert "high" not in cluster.dispatched()
    assert cluster.reason("high") == waiting_for


def test_a_waiting_preemptor_takes_a_node_relabelled_into_its_zone_with_less_room() -> None:
    # Given a preemptor for zone x waiting, and n1 (zone y) freed, used by nobody since
    cluster = preemptor_waiting(node_selector={"zone": "x"})
    cluster.finish(4000, "keeper")
    cluster.given(5000, job("widest", "q", gpu=8, priority=1, node_selector={"zone": "x"}))

    # When n1 is heard again in zone x, with half the GPUs: its free room shrank
    cluster.when(6000, node("n1", gpu=4, **ZONE_X))

    # Then the preemptor runs there
    assert [(c.job, c.node) for c in cluster.last if c.type == "Dispatch"] == [("high", "n1")]


def test_a_waiting_preemptor_whose_victim_stops_takes_the_room_held_for_it() -> None:
    # Given a preemptor waiting for its victim on n0, passed over by the last cycles
    cluster = preemptor_waiting()

    # When the victim stops
    cluster.when(4000, event("JobPreempted", job="low", node="n0", attempt=1))

    # Then the preemptor runs on the room held for it
    assert [(c.job, c.node) for c in cluster.last if c.type == "Dispatch"] == [("high", "n0")]


def test_room_noted_for_one_waiting_preemptor_is_not_passed_over_by_the_next() -> None:
    # Given two preemptors waiting for their victims, passed over by the last cycle:
    # `high_y` (zone y, walked first: higher priority) and `high_x` (zone x), while
    # `keeper` (which neither may preempt) runs alone on n2 (zone x)
    cluster = Cluster()
    cluster.given(
        0,
        queue("q", gpu_quota=12, preemption={"within_queue": True}),
        node("n0", gpu=4, labels={"zone": "x", "rack": "0"}),
        node("n1", gpu=4, **ZONE_Y),
        node("n2", gpu=4, labels={"zone": "x", "rack": "2"}),
    )
    cluster.given(
        0,
        job("low_x", "q", gpu=4, priority=1, node_selector={"rack": "0"}),
        job("low_y", "q", gpu=4, priority=1, node_selector={"zone": "y"}),
        job("keeper", "q", gpu=4, priority=9, node_selector={"rack": "2"}),
    )
    cluster.agents_obey()
    cluster.given(
        1000,
        job("high_y", "q", gpu=4, priority=6, node_selector={"zone": "y"}),
        job("high_x", "q", gpu=4, priority=5, node_selector={"zone": "x"}),
    )
    assert sorted(cluster.preempted(cluster.commands)) == ["low_x", "low_y"]
    cluster.given(2000, job("wide", "q", gpu=8, priority=1))

    # When `keeper` ends: n2's room grows, which the ask for `high_y` notes (n2 then stays
    # a suspect: it could take a task of `high_x`), and `high_x` is asked after it
    cluster.finish(3000, "keeper")

    # Then `high_x` runs on n2 in that cycle; `high_y` still waits
    assert [(c.job, c.node) for c in cluster.last if c.type == "Dispatch"] == [("high_x", "n2")]
    assert cluster.job_view("high_y").awaiting == ("low_y",)
