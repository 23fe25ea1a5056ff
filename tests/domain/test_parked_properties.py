"""Passing over parked preemptors changes no command and no view: each run is checked against
one that asks every waiting preemptor in full (domain/cycle/parked.py), over clusters where
preemptors wait for slow victims while other jobs end, nodes are relabelled or resized, and
room frees where some of them could go."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import NodeCommand, Preempt
from domain.cycle import awaiting
from domain.cycle.parked import Parked
from domain.state import State
from tests.domain.test_preemption_properties import queue_line
from tests.domain.test_shortcut_properties import SlowStops

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ZONES = ["x", "y"]


class StaggeredStops(SlowStops):
    """Victims take 2 to 8 s to stop, by job and node: a preemptor waits through many cycles
    of other jobs, and its victims stop one after another."""

    def _answer(self, ts: int, command: NodeCommand) -> None:
        if isinstance(command, Preempt) and command.node not in self._down:
            self._told += 1
            due = ts + 2000 * (1 + sum(map(ord, command.job + command.node)) % 4)
            heapq.heappush(self._late, (due, self._told, command))
            return
        super()._answer(ts, command)


@st.composite
def waiting_preemptors(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Queue a preempts within itself by priority, queue b reclaims its quota; low-priority
    jobs of many shapes fill a few labelled nodes and end at drawn times, higher ones arrive
    and wait for victims, and some nodes are heard again with other labels or capacity."""
    lines: list[dict[str, Any]] = [
        {
            "type": "ClusterConfigured",
            "ts": 0,
            "placement": draw(st.sampled_from(["binpack", "spread"])),
            "consolidation": draw(st.booleans()),
        },
        queue_line("a", None, draw(st.integers(0, 4)), {"within_queue": True}),
        queue_line("b", None, draw(st.integers(2, 12)), {"within_queue": False}),
    ]
    nodes = draw(st.integers(2, 4))

    def heartbeat(ts: int, index: int) -> dict[str, Any]:
        return {
            "type": "NodeHeartbeat",
            "ts": ts,
            "node": f"n{index}",
            "capacity": {"gpu": draw(st.sampled_from([2, 4, 8]))},
            "labels": {"zone": draw(st.sampled_from(ZONES))},
        }

    lines.extend(heartbeat(0, index) for index in range(nodes))
    ts = 0
    for index in range(draw(st.integers(6, 24))):
        ts += draw(st.sampled_from([0, 0, 1000, 2000]))
        tasks = draw(st.integers(1, 3))
        line: dict[str, Any] = {
            "type": "JobSubmitted",
            "ts": ts,
            "job": f"j{index}",
            "queue": draw(st.sampled_from(["a", "a", "b"])),
            "priority": draw(st.integers(1, 9)),
            "tasks": tasks,
            "resources": {"gpu": draw(st.sampled_from([0.5, 1, 2, 4]))},
            "duration_s": draw(st.integers(1, 30)),
        }
        if draw(st.integers(0, 3)) == 0:
            line["node_selector"] = {"zone": draw(st.sampled_from(ZONES))}
        if tasks > 1 and draw(st.booleans()):
            line["min_tasks"] = draw(st.integers(1, tasks - 1))
        lines.append(line)
        if draw(st.integers(0, 4)) == 0:
            lines.append(heartbeat(ts, draw(st.integers(0, nodes - 1))))
    return lines


def _views(state: State) -> list[tuple[object, ...]]:
    """What the views show of each job: status, reason and since when blocked."""
    return [
        (
            job.id,
            job.status,
            None if job.pending_reason is None else job.pending_reason.text,
            job.blocked_since,
        )
        for job in sorted(state.jobs.values(), key=lambda job: job.id)
    ]


def _run(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[object, ...]]]:
    simulator = StaggeredStops()
    out = list(simulator.run(orjson.dumps(line) for line in lines))
    return out, _views(simulator.state)


@contextmanager
def _asking_every_preemptor_in_full() -> Iterator[None]:
    """Neither the parked set nor the glance at it (`awaiting._at_a_glance`) answers."""
    with (
        mock.patch.object(Parked, "passes_over", lambda self, state, job: False),
        mock.patch.object(awaiting, "_at_a_glance", lambda state, statement, job: False),
    ):
        yield


@SETTINGS
@given(waiting_preemptors())
def test_passing_over_parked_preemptors_changes_no_command_and_no_view(
    lines: list[dict[str, Any]],
) -> None:
    with _asking_every_preemptor_in_full():
        asked = _run(lines)
    assert _run(lines) == asked
