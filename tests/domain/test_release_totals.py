"""A victim search whose queues may not release, in all, what the job needs stops before walking: the same commands and reasons as when it walks.

Two bounds spend the queues' caps once (domain/cycle/release_totals.py): in total, and node by
node (each task more paid for by what its node still lacks)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from domain.cycle import release_totals
from domain.cycle.room import Room
from domain.resources import MANY_COPIES
from tests.domain.test_blocked_shapes import WatchedSimulator, simulate
from tests.domain.test_ranked_walk import gangs_over_small_nodes, spread_cluster
from tests.domain.test_reclaim_properties import scenarios
from tests.domain.test_shortcut_properties import SlowStops


class SlowStopsWatched(SlowStops, WatchedSimulator):
    """Agents that report stopped tasks late (so preemptions stay in flight across cycles,
    holding what they free), watched after every cycle."""


def _filling_b(draw: st.DrawFn, nodes: int, finish_some: bool) -> list[dict[str, Any]]:
    """Two to four times `nodes` one-GPU jobs of queue b at once, of any priority (spread,
    they fill the nodes); with `finish_some`, about a quarter end a second after they start."""
    jobs: list[dict[str, Any]] = []
    for index in range(draw(st.integers(2 * nodes, 4 * nodes))):
        submitted: dict[str, Any] = {
            "type": "JobSubmitted",
            "ts": 1000,
            "job": f"b{index}",
            "queue": "b",
            "priority": draw(st.integers(1, 9)),
            "resources": {"gpu": 1},
        }
        if finish_some and draw(st.integers(0, 3)) == 0:
            submitted["duration_s"] = 1
        jobs.append(submitted)
    return jobs


@st.composite
def reclaims_in_flight(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Nodes of 4 GPUs filled by queue b beyond its share (one-GPU jobs, spread); queue a,
    below its quota, asks for jobs of whole nodes, and cancels some while their victims are
    still stopping. What those victims free is then held for no one, and b may release only
    what is left of its excess: the jobs a asks next may find too little in all."""
    nodes = draw(st.integers(3, 7))
    quotas = {"a": draw(st.integers(4, 4 * nodes)), "b": draw(st.integers(0, 4))}
    lines = spread_cluster(quotas, nodes, gpus=4) + _filling_b(draw, nodes, finish_some=False)
    ts = 2000
    for index in range(draw(st.integers(1, 4))):
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": ts,
                "job": f"a{index}",
                "queue": "a",
                "tasks": draw(st.integers(1, 2)),
                "resources": {"gpu": draw(st.sampled_from((2, 3, 4)))},
            }
        )
        if draw(st.booleans()):
            lines.append({"type": "JobCancelled", "ts": ts + 100, "job": f"a{index}"})
        ts += 200
    return lines


@st.composite
def scattered_holes(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Nodes of 4 GPUs filled by queue b beyond its share with one-GPU jobs, some of which
    finish soon and leave a GPU or two free here and there; queue a, below its quota, then
    asks for gangs of whole nodes. The free GPUs and b's excess may add up to a node's worth
    while no node can be emptied for one task."""
    nodes = draw(st.integers(3, 7))
    quotas = {"a": draw(st.integers(4, 4 * nodes)), "b": draw(st.integers(0, 4 * nodes))}
    lines = spread_cluster(quotas, nodes, gpus=4) + _filling_b(draw, nodes, finish_some=True)
    for index in range(draw(st.integers(1, 3))):
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": 3000 + 1000 * index,
                "job": f"a{index}",
                "queue": "a",
                "tasks": draw(st.integers(1, 3)),
                "resources": {"gpu": 4},
            }
        )
    return lines


def _walking_whatever_the_queues_release() -> Any:
    every = lambda room, queues: MANY_COPIES  # noqa: E731
    return mock.patch.multiple(release_totals, most_released=every, most_paid_for=every)


def assert_as_when_walking(lines: list[dict[str, Any]]) -> None:
    totals, paid_for = release_totals.most_released, release_totals.most_paid_for
    stopped: set[str] = set()

    def watched(room: Room, queues: Any, enough: int) -> int:
        most = counted(room, queues, enough)
        if totals(room, queues) < enough:
            stopped.add("in total")
        elif most < enough <= room._counted(queues, enough) and paid_for(room, queues) < enough:
            stopped.add("node by node")
        return most

    counted = Room.most_if_emptied
    with mock.patch.object(Room, "most_if_emptied", watched):
        with_bounds = simulate(lines, SlowStopsWatched)
    for bound in ("in total", "node by node"):
        event(f"searches stopped {bound}: {'some' if bound in stopped else 'none'}")
    with _walking_whatever_the_queues_release():
        walking = simulate(lines, SlowStopsWatched)
    assert with_bounds == walking


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaims_in_flight())
def test_stopping_where_the_queues_release_too_little_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_walking(lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scattered_holes())
def test_stopping_where_no_node_could_be_emptied_for_a_task_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_walking(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios(), gangs_over_small_nodes()))
def test_the_release_bounds_change_no_command_or_reason_in_other_reclaims(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_walking(lines)
