"""A consolidation plan that found nothing is not made again for a look-alike job while no
node, running job, hold or configuration changed: the commands and reasons are the same as
when every plan is made."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.actions import consolidate
from domain.cycle.room import Room
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_blocked_shapes import simulate


def counting_plans() -> tuple[list[str], Any]:
    made: list[str] = []
    real = consolidate.plan_moves

    def plan_moves(cycle: Any, job: Any, tasks: int, avoid: Any = frozenset()) -> Any:
        made.append(job.id)
        return real(cycle, job, tasks, avoid)

    return made, mock.patch.object(consolidate, "plan_moves", plan_moves)


def half_full_nodes() -> Cluster:
    """Two 4-GPU nodes, each running a 2-GPU job that may not move: 4 GPUs free in all, but
    on no one node."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", consolidation=True),
        queue("a", gpu_quota=16, policy={"kind": "round_robin"}),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    cluster.when(1, job("a1", "a", gpu=2, preemptible=False), job("a2", "a", gpu=2))
    cluster.agents_obey()
    cluster.when(2, job("b1", "a", gpu=2, preemptible=False), job("b2", "a", gpu=2))
    cluster.agents_obey()
    cluster.finish(3, "a2")
    cluster.finish(3, "b2")
    return cluster


def test_a_look_alike_of_a_job_no_plan_could_help_is_not_planned_again() -> None:
    # Given two half-full nodes
    cluster = half_full_nodes()
    made, counting = counting_plans()
    with counting:
        # When a 4-GPU job waits, and a look-alike arrives in a later cycle
        cluster.when(10, job("big", "a", gpu=4))
        cluster.when(11, job("big-2", "a", gpu=4))
        # Then one plan was made, for the first: no later try changed any allocation
        assert made == ["big"]
        assert cluster.last == []
        # When a node joins, so the room changes
        cluster.when(12, node("n3", gpu=1))
        # Then the first waiting job is planned for again, and its look-alike is not
        assert made == ["big", "big"]
    assert cluster.why("big-2") == cluster.why("big")


def test_a_heartbeat_that_repeats_its_node_changes_no_room_so_no_plan_is_made_again() -> None:
    # Given two half-full nodes, and a 4-GPU job that no plan could help
    cluster = half_full_nodes()
    made, counting = counting_plans()
    with counting:
        cluster.when(10, job("big", "a", gpu=4))
        # When both nodes are heard again as they were, and a look-alike arrives
        cluster.when(11, node("n1", gpu=4), node("n2", gpu=4), job("big-2", "a", gpu=4))
        # Then no plan is made again: a repeated heartbeat changes no node's room
        assert made == ["big"]
        # When a node is heard with a new label (what a selector may choose changes)
        cluster.when(12, node("n1", gpu=4, labels={"rack": "r1"}))
        # Then the first waiting job is planned for again
        assert made == ["big", "big"]
    assert cluster.why("big-2") == cluster.why("big")


def test_moves_that_made_too_little_room_are_not_planned_again_for_a_job_of_that_request() -> None:
    # Given two half-full nodes
    cluster = half_full_nodes()
    rooms: list[str] = []
    real_room = Room

    def counting_room(state: Any, statement: Any, job: Any) -> Any:
        rooms.append(job.id)
        return real_room(state, statement, job)

    with mock.patch.object(consolidate, "Room", counting_room):
        # When two 4-GPU jobs wait that are no look-alikes (one may not be preempted)
        cluster.when(10, job("big", "a", gpu=4), job("big-np", "a", gpu=4, preemptible=False))
        # Then moves were planned for the first only: making room reads the request and the
        # nodes, not what else the job is (its queue, kind or priority)
        assert rooms == ["big"]
        assert cluster.last == []
    assert cluster.why("big-np") == cluster.why("big")


@st.composite
def fragmenting_arrivals(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Jobs of 1-3 GPUs (one or two tasks) arriving and ending over time on a few 4-GPU
    nodes, consolidation on: waiting jobs are planned for again and again while others come
    and go, and a plan that failed often finds moves later."""
    lines: list[dict[str, Any]] = [{"type": "ClusterConfigured", "ts": 0, "consolidation": True}]
    for name in ("a", "b"):
        lines.append(
            {
                "type": "QueueConfigured",
                "ts": 0,
                "queue": name,
                "resources": {"gpu": {"quota": draw(st.integers(0, 8)), "limit": -1}},
                "policy": {"kind": draw(st.sampled_from(["round_robin", "fifo", "balance"]))},
            }
        )
    for index in range(draw(st.integers(2, 5))):
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index}", "capacity": {"gpu": 4}}
        )
    nodes = index + 1
    ts = 0
    for index in range(draw(st.integers(4, 40))):
        ts += draw(st.sampled_from([0, 1000, 1000, 3000]))
        if draw(st.booleans()):
            # A node heard again, as it was or with a label: only the label changes its view.
            labels = draw(st.sampled_from([{}, {}, {"rack": "r1"}]))
            lines.append(
                {
                    "type": "NodeHeartbeat",
                    "ts": ts,
                    "node": f"n{draw(st.integers(0, nodes - 1))}",
                    "capacity": {"gpu": 4},
                    "labels": labels,
                }
            )
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": ts,
                "job": f"j{index}",
                "queue": draw(st.sampled_from(["a", "b"])),
                "tasks": draw(st.integers(1, 2)),
                "resources": {"gpu": draw(st.sampled_from([1, 1, 1, 2, 3]))},
                "preemptible": draw(st.sampled_from([True, True, True, False])),
                "duration_s": draw(st.integers(1, 20)),
            }
        )
    return lines


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_a_remembered_failure_is_one_a_plan_made_now_would_find(
    lines: list[dict[str, Any]],
) -> None:
    real_known, real_plan = consolidate._known_to_fail, consolidate.plan_moves

    def checked(cycle: Any, job: Any) -> bool:
        known = real_known(cycle, job)
        if known:  # then a plan made now finds nothing either
            assert real_plan(cycle, job, job.tasks) is None, job.id
        return known

    with mock.patch.object(consolidate, "_known_to_fail", checked):
        simulate(lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_remembered_failed_plans_give_the_commands_and_reasons_of_plans_made_anew(
    lines: list[dict[str, Any]],
) -> None:
    remembered = simulate(lines)
    with mock.patch.object(consolidate, "_stamp", lambda cycle: None):  # every plan made
        planned = simulate(lines)
    assert remembered == planned
