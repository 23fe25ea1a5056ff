"""Consolidation (Run:AI): moving running jobs so a fragmented job fits, end to end."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from domain.read_models import JobView, job_ids, job_view
from domain.simulation import Simulator
from domain.state import State
from tests.domain.harness import Cluster, event, job, node, queue


def fragmented(consolidation: bool = True, **survivors: Any) -> Cluster:
    """Two 4-GPU nodes, each with 2 GPUs free and one 2-GPU job (a1, b1) left running."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", consolidation=consolidation),
        queue("a", gpu_quota=8),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    cluster.when(1, job("a1", "a", gpu=2, **survivors), job("a2", "a", gpu=2))
    cluster.agents_obey()
    cluster.when(2, job("b1", "a", gpu=2, **survivors), job("b2", "a", gpu=2))
    cluster.agents_obey()
    on = {c.job: c.node for c in cluster.commands if c.type == "Dispatch"}
    assert on == {"a1": "n1", "a2": "n1", "b1": "n2", "b2": "n2"}
    cluster.finish(3, "a2")
    cluster.finish(3, "b2")
    return cluster


def test_moves_one_job_to_make_room_for_a_larger_one() -> None:
    cluster = fragmented()
    cluster.when(10, job("big", "a", gpu=4))
    assert [(c.type, c.job, c.node, c.attempt, c.reason) for c in cluster.last] == [
        ("Dispatch", "a1", "n2", 2, "consolidation"),  # its new place first
        ("Preempt", "a1", "n1", 1, "consolidation"),
    ]
    assert cluster.last[1].by == "big"  # type: ignore[union-attr]
    cluster.agents_obey()  # JobStarted(a1, n2, 2) and JobPreempted(a1, n1, 1)
    assert [(c.job, c.node) for c in cluster.last] == [("big", "n1")]
    moved = cluster.job_view("a1")
    assert (moved.status, moved.placements, moved.stopping) == ("running", (("n2", 1),), ())
    assert moved.started == ("n2",)


@pytest.mark.parametrize(("limit", "moves"), [(6, True), (5, False)])
def test_a_move_never_takes_its_queue_past_a_limit_while_it_runs_twice(
    limit: int, moves: bool
) -> None:
    # Given two 2-GPU jobs of a queue limited to `limit` GPUs, spread over two 4-GPU nodes,
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", consolidation=True, placement="spread"),
        queue("a", gpu_quota=4),
        queue("capped", gpu_quota=4, gpu_limit=limit),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    cluster.given(1, job("c1", "capped", gpu=2), job("c2", "capped", gpu=2))
    cluster.agents_obey()
    # when a 4-GPU job comes, which fits only if one of them moves,
    cluster.when(10, job("big", "a", gpu=4))
    # then the move is made only if the capped queue stays within its limit while the
    # moved job runs in both places (its new place starts before its old tasks stop).
    moved = [(c.type, c.reason) for c in cluster.last]
    assert moved == ([("Dispatch", "consolidation"), ("Preempt", "consolidation")] if moves else [])
    assert cluster.queue_view("capped").allocated.gpu <= limit * 1000  # milli-GPU


@pytest.mark.parametrize(("limit", "moves"), [(4, 2), (3, 0)])
def test_moves_planned_together_count_together_against_a_limit(limit: int, moves: int) -> None:
    # Given two 1-GPU jobs of a queue limited to `limit` GPUs, alone on two 4-GPU nodes, and
    # 2 GPUs free on a third node,
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", consolidation=True, placement="spread"),
        queue("a", gpu_quota=12),
        queue("capped", gpu_quota=2, gpu_limit=limit),
        *(node(f"n{i}", gpu=4) for i in (1, 2, 3)),
    )
    cluster.given(1, job("c1", "capped", gpu=1), job("c2", "capped", gpu=1))
    cluster.agents_obey()
    cluster.given(2, job("y", "a", gpu=2, preemptible=False))
    cluster.agents_obey()
    # when a job of two 4-GPU tasks comes, which fits only if both move to the third node,
    cluster.when(10, job("big", "a", gpu=4, tasks=2))
    # then both move only if the capped queue stays within its limit while both run twice.
    moved = sorted(c.job for c in cluster.last if c.type == "Dispatch")
    assert moved == ["c1", "c2"][:moves]


def test_nothing_moves_when_consolidation_is_off() -> None:
    cluster = fragmented(consolidation=False)
    cluster.when(10, job("big", "a", gpu=4))
    assert cluster.last == []


def test_nothing_moves_unless_that_makes_the_job_fit() -> None:
    cluster = fragmented(preemptible=False)  # neither a1 nor b1 may move
    cluster.when(10, job("big", "a", gpu=4))
    assert cluster.last == []
    cluster.when(11, job("huge", "a", gpu=5))  # more than the total free capacity
    assert cluster.last == []


def test_interactive_jobs_are_never_moved() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=4), node("n2", gpu=4))
    cluster.when(
        1, job("nb1", "a", gpu=2, interactive=True), job("nb2", "a", gpu=2, interactive=True)
    )
    cluster.when(2, job("x", "a", gpu=2), job("y", "a", gpu=2))
    cluster.finish(3, "nb2")
    cluster.finish(3, "y")
    cluster.when(10, job("big", "a", gpu=4))
    moved = {c.job for c in cluster.last}
    assert "nb1" not in moved


def test_a_late_report_of_the_old_attempt_changes_only_its_own_tasks() -> None:
    cluster = fragmented()
    cluster.when(10, job("big", "a", gpu=4))
    # The old tasks finish on their own before the agent acknowledges the Preempt.
    cluster.when(11, event("JobFinished", job="a1", node="n1", attempt=1, outcome="succeeded"))
    moved = cluster.job_view("a1")
    assert (moved.status, moved.placements, moved.stopping) == ("running", (("n2", 1),), ())
    assert cluster.dispatched() == ["big"]


def test_the_simulator_shows_a_consolidation_end_to_end() -> None:
    def submit(name: str, ts: int, gpu: int, duration_s: int) -> dict[str, Any]:
        return {"type": "JobSubmitted", "ts": ts, "job": name, "queue": "a"} | {
            "resources": {"gpu": gpu},
            "duration_s": duration_s,
        }

    lines: list[dict[str, Any]] = [
        {"type": "QueueConfigured", "ts": 0, "queue": "a", "resources": {"gpu": {"quota": 8}}},
        {"type": "NodeHeartbeat", "ts": 0, "node": "n1", "capacity": {"gpu": 4}},
        {"type": "NodeHeartbeat", "ts": 0, "node": "n2", "capacity": {"gpu": 4}},
        submit("long-1", 1, 2, 100),
        submit("short-1", 1, 2, 1),
        submit("long-2", 1, 2, 100),
        submit("short-2", 1, 2, 1),
        submit("big", 5000, 4, 10),
    ]
    simulator = Simulator()
    out = list(simulator.run(orjson.dumps(line) for line in lines))
    at_5000 = [
        (o["type"], o["job"], o["node"], o["attempt"], o["reason"]) for o in out if o["ts"] == 5000
    ]
    assert at_5000 == [
        ("Dispatch", "long-1", "n2", 2, "consolidation"),
        ("Preempt", "long-1", "n1", 1, "consolidation"),
        ("Dispatch", "big", "n1", 1, "quota"),
    ]
    # Every job still finishes: the moved one restarts its run at its new place.
    assert job_ids(simulator.state) == []
    names = ["big", "long-1", "long-2", "short-1", "short-2"]
    assert {name: view_of(simulator.state, name).status for name in names} == dict.fromkeys(
        names, "finished"
    )


def test_a_gang_fits_after_two_moves_all_dispatched_before_any_preempt() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="spread"),
        queue("a", gpu_quota=12),
        node("n1", gpu=4),
        node("n2", gpu=4),
        node("n3", gpu=4),
    )
    cluster.when(1, job("r1", "a", gpu=1), job("r2", "a", gpu=1), job("r3", "a", gpu=2))
    cluster.agents_obey()
    assert {c.job: c.node for c in cluster.commands if c.type == "Dispatch"} == {
        "r1": "n3",
        "r2": "n2",
        "r3": "n1",
    }
    cluster.when(2, event("ClusterConfigured", placement="binpack"))
    cluster.when(3, job("pair", "a", gpu=4, tasks=2))  # 8 GPUs free in total, 3 at most on a node
    assert [(c.type, c.job, c.node) for c in cluster.last] == [
        ("Dispatch", "r2", "n1"),
        ("Dispatch", "r1", "n1"),
        ("Preempt", "r2", "n2"),
        ("Preempt", "r1", "n3"),
    ]
    cluster.agents_obey()
    assert sorted((c.job, c.node) for c in cluster.last) == [("pair", "n2"), ("pair", "n3")]
    assert cluster.node_view("n1").allocated.gpu == 4000


def test_nothing_moves_for_a_job_beyond_its_queues_fair_share() -> None:
    cluster = fragmented()
    crowd = {"gpu": {"quota": 0, "limit": -1, "over_quota_weight": 3}}
    cluster.given(
        5,
        queue("borrower", gpu_quota=0),
        queue("crowd", resources=crowd),
        job("wide", "crowd", gpu=8, node_selector={"zone": "nowhere"}),  # demand, never placed
    )
    cluster.when(10, job("big", "borrower", gpu=4))
    # The spare 4 GPUs are shared 1 : 3, so `big` would run 3 GPUs beyond its queue's share:
    # moving a1 for it would only invite a reclaim.
    assert cluster.queue_view("borrower").own_fair_share[0] == 1000
    assert cluster.last == []


def view_of(state: State, job_id: str) -> JobView:
    found = job_view(state, job_id)
    assert found is not None
    return found


def test_residents_with_nowhere_to_go_are_passed_over_for_one_that_can_move() -> None:
    # Given three 4-GPU nodes with one GPU free each: n1 and n2 each run one 3-GPU job,
    # which no node has room for elsewhere; n3 runs a 1-GPU and a 2-GPU job,
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", gpu_quota=12),
        node("n1", gpu=4),
        node("n2", gpu=4),
        node("n3", gpu=4),
    )
    cluster.when(1, job("w1", "a", gpu=3), job("w2", "a", gpu=3))
    cluster.when(2, job("f1", "a", gpu=1), job("f2", "a", gpu=1))  # fill n1 and n2 for now
    cluster.when(3, job("one", "a", gpu=1), job("two", "a", gpu=2))
    cluster.agents_obey()
    assert {c.job: c.node for c in cluster.commands if c.type == "Dispatch"} == {
        "w1": "n1",
        "w2": "n2",
        "f1": "n1",
        "f2": "n2",
        "one": "n3",
        "two": "n3",
    }
    cluster.finish(4, "f1")
    cluster.finish(4, "f2")
    # when a 2-GPU job asks for room,
    cluster.when(5, job("pair", "a", gpu=2))
    # then only the 1-GPU job moves (into a one-GPU hole), and the pair gets n3.
    assert [(c.type, c.job, c.node) for c in cluster.last] == [
        ("Dispatch", "one", "n1"),
        ("Preempt", "one", "n3"),
    ]
    cluster.agents_obey()
    assert [(c.job, c.node) for c in cluster.last] == [("pair", "n3")]


def test_what_could_be_lifted_is_known_per_node_selector() -> None:
    # Given x nodes n1 (a 1-GPU job r1, 3 free) and n5 (a 2-GPU and a 1-GPU job, 1 free),
    # and y nodes n2 and n3 (a 2-GPU job each, 2 free) and n4 (one GPU, free),
    x: dict[str, Any] = {"labels": {"zone": "x"}}
    y: dict[str, Any] = {"labels": {"zone": "y"}}
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="spread"),
        queue("a", gpu_quota=32),
        node("n1", gpu=4, **x),
        node("n2", gpu=4, **y),
        node("n3", gpu=4, **y),
        node("n4", gpu=1, **y),
        node("n5", gpu=4, labels={"zone": "x", "rack": "5"}),
    )
    zone_x: dict[str, Any] = {"node_selector": {"zone": "x"}}
    zone_y: dict[str, Any] = {"node_selector": {"zone": "y"}}
    cluster.when(1, job("t5", "a", gpu=2, **zone_x), job("s3", "a", gpu=2, **zone_y))
    cluster.when(
        2,
        job("r1", "a", gpu=1, **zone_x),
        job("s2", "a", gpu=2, **zone_y),
        job("u5", "a", gpu=1, node_selector={"rack": "5"}),
    )
    cluster.agents_obey()
    on = {c.job: c.node for c in cluster.commands if c.type == "Dispatch"}
    assert on == {"t5": "n5", "u5": "n5", "r1": "n1", "s2": "n2", "s3": "n3"}
    # when a 4-GPU job of zone y is planned for (s2 moves next to s3),
    cluster.when(3, job("py", "a", gpu=4, **zone_y))
    assert [(c.type, c.job, c.node) for c in cluster.last] == [
        ("Dispatch", "s2", "n3"),
        ("Preempt", "s2", "n2"),
    ]
    cluster.agents_obey()
    # then a 4-GPU job of zone x finds r1 on n1 (a node no y job may use, unchanged since)
    # worth lifting, though lifting nothing on n5 would help: r1 moves to n5.
    cluster.when(4, job("px", "a", gpu=4, **zone_x))
    assert [(c.type, c.job, c.node) for c in cluster.last] == [
        ("Dispatch", "r1", "n5"),
        ("Preempt", "r1", "n1"),
    ]
    cluster.agents_obey()
    assert [(c.job, c.node) for c in cluster.last] == [("px", "n1")]


def test_each_move_lands_on_room_left_by_the_moves_before_it() -> None:
    # Given four 4-GPU nodes: two with a 1-GPU job alone (3 GPUs free), two with a 3-GPU
    # job (1 GPU free),
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="spread"),
        queue("a", gpu_quota=16),
        *(node(f"n{index}", gpu=4) for index in range(4)),
    )
    cluster.given(1, job("c", "a", gpu=3), job("d", "a", gpu=3))
    cluster.agents_obey()
    cluster.given(2, job("a1", "a", gpu=1), job("b1", "a", gpu=1))
    cluster.agents_obey()
    assert {c.job: c.node for c in cluster.commands if c.type == "Dispatch"} == {
        "c": "n3",
        "d": "n2",
        "a1": "n1",
        "b1": "n0",
    }
    cluster.given(3, event("ClusterConfigured", placement="binpack"))
    # when a gang of two 4-GPU tasks comes (8 GPUs free in all, 3 at most on a node),
    cluster.when(4, job("pair", "a", gpu=4, tasks=2))
    # then both 1-GPU jobs move, each to a node whose last free GPU it takes: the second
    # lands where the first left room, not where the first went.
    assert [(c.type, c.job, c.node) for c in cluster.last] == [
        ("Dispatch", "b1", "n2"),
        ("Dispatch", "a1", "n3"),
        ("Preempt", "b1", "n0"),
        ("Preempt", "a1", "n1"),
    ]
    cluster.agents_obey()
    assert sorted((c.job, c.node) for c in cluster.last) == [("pair", "n0"), ("pair", "n1")]
