"""A victim search whose queues may not release, in all, what the job needs stops before walking: the same commands and reasons as when it walks."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from domain.cycle.room import Room
from domain.resources import MANY_COPIES
from tests.domain.test_blocked_shapes import WatchedSimulator, simulate
from tests.domain.test_ranked_walk import gangs_over_small_nodes, spread_cluster
from tests.domain.test_reclaim_properties import scenarios
from tests.domain.test_shortcut_properties import SlowStops


class SlowStopsWatched(SlowStops, WatchedSimulator):
    """Agents that report stopped tasks late (so preemptions stay in flight across cycles,
    holding what they free), watched after every cycle."""


@st.composite
def reclaims_in_flight(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Nodes of 4 GPUs filled by queue b beyond its share (one-GPU jobs, spread); queue a,
    below its quota, asks for jobs of whole nodes, and cancels some while their victims are
    still stopping. What those victims free is then held for no one, and b may release only
    what is left of its excess: the jobs a asks next may find too little in all."""
    nodes = draw(st.integers(3, 7))
    quotas = {"a": draw(st.integers(4, 4 * nodes)), "b": draw(st.integers(0, 4))}
    lines = spread_cluster(quotas, nodes, gpus=4)
    for index in range(draw(st.integers(2 * nodes, 4 * nodes))):
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": 1000,
                "job": f"b{index}",
                "queue": "b",
                "priority": draw(st.integers(1, 9)),
                "resources": {"gpu": 1},
            }
        )
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


def _walking_whatever_the_queues_release() -> Any:
    return mock.patch.object(Room, "_most_released", lambda room, queues: MANY_COPIES)


def assert_as_when_walking(lines: list[dict[str, Any]]) -> None:
    counted = Room.most_if_emptied
    stopped: list[bool] = []

    def watched(room: Room, queues: Any, enough: int) -> int:
        stopped.append(room._most_released(queues) < enough)
        return counted(room, queues, enough)

    with mock.patch.object(Room, "most_if_emptied", watched):
        with_bound = simulate(lines, SlowStopsWatched)
    event(f"searches the totals stopped: {'some' if any(stopped) else 'none'}")
    with _walking_whatever_the_queues_release():
        walking = simulate(lines, SlowStopsWatched)
    assert with_bound == walking


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaims_in_flight())
def test_stopping_where_the_queues_release_too_little_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_walking(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios(), gangs_over_small_nodes()))
def test_the_totals_bound_changes_no_command_or_reason_in_other_reclaims(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_walking(lines)
