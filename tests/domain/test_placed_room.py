"""A victim search that no walk could finish stops before walking: when its candidate queues
could not make room even with every task they may release stopped, it lists no victim;
when its listed steps, all taken, would leave the devices short of its target, it walks
none. The same commands and reasons as when every search lists and walks; what each queue
could free (`Allocations.stoppable_on`) equals what its preemptible, non-interactive jobs'
placements add up to after every cycle; and `AllTaken` counts exactly what taking
every step leaves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.cycle import candidates, victims
from domain.cycle.room import Room, VictimStep, victim_steps
from domain.cycle.room_bounds import AllTaken
from domain.cycle.statement import Statement
from domain.resources import ZERO, Resources
from domain.snapshot import decode_state, encode_state
from tests.domain.harness import Cluster, job, node, queue
from tests.domain.test_blocked_shapes import WatchedSimulator, look_alike_backlogs, simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_reclaim_properties import scenarios


def counted_afresh(
    placements: list[tuple[str, str, Resources, int]],
) -> dict[str, dict[str, Resources]]:
    """Per queue, per node, what the placements add up to."""
    counted: dict[str, dict[str, Resources]] = {}
    for queue_id, node_id, per_task, tasks in placements:
        per_node = counted.setdefault(queue_id, {})
        per_node[node_id] = per_node.get(node_id, ZERO) + per_task * tasks
    return {
        q: {n: r for n, r in per_node.items() if not r.is_zero()} for q, per_node in counted.items()
    }


class PlacedChecked(WatchedSimulator):
    """Checks what every queue could free after every cycle, besides noting why jobs wait."""

    def _cycle_and_answer(self, ts: int) -> None:
        super()._cycle_and_answer(ts)
        state = self.state
        expected = counted_afresh(
            [
                (job_.queue, node_id, job_.per_task, tasks)
                for job_ in state.jobs.values()
                if job_.preemptible and not job_.interactive
                for node_id, tasks in job_.placements.items()
            ]
        )
        for queue_id in sorted(state.queues):
            kept = {n: r for n, r in state.stoppable_on(queue_id).items() if not r.is_zero()}
            assert kept == expected.get(queue_id, {}), queue_id


@contextmanager
def every_search_lists() -> Iterator[None]:
    """No search stopped by either bound: the queues' room is taken to be above any size,
    and the steps' room, all taken, to reach any target."""
    with (
        mock.patch.object(Room, "most_if_emptied", lambda room, queues, enough: 1 << 62),
        mock.patch.object(AllTaken, "reaches", lambda all_taken, target: True),
    ):
        yield


def taken_for_real(room: Room, steps: list[VictimStep]) -> AllTaken:
    """`AllTaken(room, steps)`, checked against a room that takes every step (then rolled back):
    the bound is at least what it holds, and `reaches` says exactly whether it holds a
    target."""
    found = AllTaken(room, steps)
    statement = room._statement
    mark = statement.checkpoint()
    check = Room(room._state, statement, room._job)
    for step in steps:
        check.take(step)
    holds = check.total
    statement.rollback(mark)
    assert found.bound >= holds
    for target in (holds, holds + 1):
        assert found.reaches(target) == (holds >= target), (target, holds)
    return found


def assert_as_when_every_search_lists(lines: list[dict[str, Any]]) -> None:
    with mock.patch.object(victims, "AllTaken", taken_for_real):
        bounded = simulate(lines, PlacedChecked)
    with every_search_lists():
        listed = simulate(lines, PlacedChecked)
    assert bounded == listed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_reclaim_bounded_by_placed_room_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_search_lists(lines)


@st.composite
def shared_devices(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The reclaim scenarios with fractions of a GPU, which share devices, and elastic jobs,
    which are stopped by halves from their latest tasks on a node: freeing enough GPUs in
    total may still leave no whole device free."""
    lines = draw(scenarios())
    for line in lines:
        if line["type"] == "NodeHeartbeat":
            line["capacity"]["gpu"] = draw(st.sampled_from([2, 4]))
        elif line["type"] == "JobSubmitted":
            line["resources"]["gpu"] = draw(st.sampled_from([0.25, 0.5, 0.5, 1, 2]))
            if draw(st.integers(0, 3)) == 0:
                line["tasks"] = draw(st.integers(2, 4))
                line["min_tasks"] = 1
    return lines


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_devices())
def test_reclaim_of_shared_devices_bounded_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_search_lists(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_reclaim_with_moves_bounded_by_placed_room_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_search_lists(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(look_alike_backlogs())
def test_priority_rules_bounded_by_placed_room_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    # Self-level, child-level, within-queue and interactive preemption search victims too.
    assert_as_when_every_search_lists(lines)


def scattered_over_share() -> Cluster:
    """Two 2-GPU nodes. Queue b, with no quota, runs one 1-GPU job on each; queue c, within
    its quota, runs the other GPU of each."""
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", gpu_quota=2),
        queue("b", gpu_quota=0),
        queue("c", gpu_quota=2),
        node("n1", gpu=2),
        node("n2", gpu=2),
    )
    cluster.when(1, job("c1", "c"))
    cluster.when(2, job("b1", "b"))
    cluster.when(3, job("c2", "c"))
    cluster.when(4, job("b2", "b"))
    cluster.agents_obey()
    return cluster


def test_a_search_whose_queues_could_not_free_a_node_lists_no_victim() -> None:
    # Given b's two jobs on two nodes, each beside one of c's
    cluster = scattered_over_share()
    assert {cluster.job(j).placements.get("n1", 0) for j in ("c1", "b1")} == {1}
    listed: list[str] = []
    real = candidates.candidate_steps

    def counting(cycle: Any, search: Any, job_: Any, rule: Any, queues: Any) -> Any:
        listed.append(job_.id)
        return real(cycle, search, job_, rule, queues)

    with mock.patch.object(victims, "candidate_steps", counting):
        # When queue a, below its deserved quota, asks for two GPUs on one node
        cluster.when(5, job("wide", "a", gpu=2))
    # Then no search listed b's jobs: stopping both frees one GPU on each node, and the job
    # needs two on one
    assert listed == []
    assert cluster.preempted() == []
    assert cluster.dispatched() == []

    # And the commands and the reason are those given when every search lists its victims
    unbounded = scattered_over_share()
    with every_search_lists(), mock.patch.object(victims, "candidate_steps", counting):
        unbounded.when(5, job("wide", "a", gpu=2))
    assert listed != []
    assert unbounded.last == cluster.last
    assert unbounded.why("wide") == cluster.why("wide")


def test_placed_room_is_counted_afresh_after_a_snapshot() -> None:
    # Given a cluster restored from its snapshot, where no queue's placed room is known yet
    cluster = scattered_over_share()
    state = decode_state(encode_state(cluster.state))
    assert all(queue_.stoppable_on is None for queue_ in state.queues.values())
    # When one queue's is asked for
    found = state.stoppable_on("b")
    # Then every queue's is what its jobs have placed
    assert found == {"n1": Resources(gpu=1000), "n2": Resources(gpu=1000)}
    assert state.queues["c"].stoppable_on == found
    assert state.queues["a"].stoppable_on == {}


def two_queues_one_gpu_over() -> Cluster:
    """Two 2-GPU nodes. Queues b and c, each with a quota of one GPU, run two 1-GPU jobs
    each, b's on n1 and c's on n2: each is one GPU above its fair share."""
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", gpu_quota=2),
        queue("b", gpu_quota=1),
        queue("c", gpu_quota=1),
        node("n1", gpu=2),
        node("n2", gpu=2),
    )
    for ts, (name, queue_id) in enumerate((("b1", "b"), ("b2", "b"), ("c1", "c"), ("c2", "c"))):
        cluster.when(ts + 1, job(name, queue_id))
    cluster.agents_obey()
    return cluster


def test_a_queue_is_counted_for_no_more_than_it_may_release() -> None:
    # Given b's two jobs on n1 and c's two on n2, each queue one GPU above its fair share
    cluster = two_queues_one_gpu_over()
    assert cluster.job("b2").placements == {"n1": 1}
    assert cluster.job("c2").placements == {"n2": 1}
    listed: list[str] = []
    real = candidates.candidate_steps

    def counting(cycle: Any, search: Any, job_: Any, rule: Any, queues: Any) -> Any:
        listed.append(type(rule).__name__)
        return real(cycle, search, job_, rule, queues)

    with mock.patch.object(victims, "candidate_steps", counting):
        # When queue a, below its deserved quota, asks for two GPUs on one node
        cluster.when(10, job("wide", "a", gpu=2))
    # Then the fair-share reclaim listed no victim: each queue may release one GPU, so no
    # node could have two free. The deserved-quota promise, not bound by the fair shares,
    # listed b's jobs and stops both
    assert listed == ["ReclaimDeserved"]
    assert [(c.job, c.reason) for c in cluster.last] == [("b1", "reclaim"), ("b2", "reclaim")]

    # And the commands and the reason are those given when every search lists its victims
    unbounded = two_queues_one_gpu_over()
    with every_search_lists():
        unbounded.when(10, job("wide", "a", gpu=2))
    assert unbounded.last == cluster.last
    assert unbounded.why("wide") == cluster.why("wide")


def test_a_shrink_step_is_counted_freeing_the_devices_of_the_latest_tasks() -> None:
    # Given a 2-GPU node: x uses half of device 0; elastic e, placed after it, half of
    # device 0 and, with its later task, half of device 1; a 1-GPU job waits
    cluster = Cluster()
    cluster.given(
        0, queue("a", gpu_quota=0, gpu_limit=0), queue("b", gpu_quota=1), node("n1", gpu=2)
    )
    cluster.when(1, job("x", "b", gpu=0.5))
    cluster.when(2, job("e", "b", gpu=0.5, tasks=2, min_tasks=1))
    cluster.when(3, job("one", "a", gpu=1))
    assert cluster.job("e").devices == {"n1": ((0,), (1,))}
    state = cluster.state
    statement = Statement(state)
    room = Room(state, statement, cluster.job("one"))
    shrink = victim_steps(cluster.job("e"))[:1]
    # When the room once e's shrink step is taken is counted, nothing taken
    counted = taken_for_real(room, shrink)
    # Then device 1, which the latest task used, counts as free: one task of the job fits
    assert counted.bound == 1
    assert counted.reaches(1)
    # And freeing x alone frees half a device: room in GPUs, none on a whole device
    freeing_x = taken_for_real(room, victim_steps(cluster.job("x")))
    assert freeing_x.bound == 1
    assert not freeing_x.reaches(1)


def two_queues_sharing_a_node() -> Cluster:
    """One 2-GPU node running a 1-GPU job of queue b and one of queue c, both above their
    fair share once queue a asks for both GPUs."""
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=2), queue("b"), queue("c"), node("n1", gpu=2))
    cluster.when(1, job("b1", "b"))
    cluster.when(2, job("c1", "c"))
    cluster.agents_obey()
    return cluster


def test_queues_that_free_a_node_only_together_are_counted_together() -> None:
    # Given b's and c's jobs sharing the node
    cluster = two_queues_sharing_a_node()
    # When queue a asks for two GPUs on one node
    cluster.when(3, job("wide", "a", gpu=2))
    # Then neither queue alone could free the node, both together do: both are stopped
    assert sorted((c.job, c.reason) for c in cluster.last) == [
        ("b1", "reclaim"),
        ("c1", "reclaim"),
    ]
    unbounded = two_queues_sharing_a_node()
    with every_search_lists():
        unbounded.when(3, job("wide", "a", gpu=2))
    assert unbounded.last == cluster.last
