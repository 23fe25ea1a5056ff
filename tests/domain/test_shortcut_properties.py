"""The cycle's shortcuts change no command: each is checked against the full steps it skips,
over generated clusters (consolidation's plan passing over residents with nowhere to go, or
over every node when no node's one job could be lifted to help, or keeping where residents of
one shape land, or reading only the nodes refiled since it last asked; Allocate passing over
preemptors still waiting for their victims)."""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from domain import indexes
from domain.actions import consolidate, lifting
from domain.actions.landing import Landing
from domain.commands import NodeCommand, Preempt
from domain.cycle.session import Session
from domain.lifting_kept import LiftingKept
from domain.simulation import Simulator
from domain.state import Job, State
from tests.domain.test_preemption_properties import run, scenarios

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fragmented(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Consolidation on, a few small nodes, jobs of 1 to 4 GPUs a task (one or two tasks)
    coming and going, and larger jobs and gangs arriving later: free GPUs end up scattered,
    so plans are made often, and residents of one request run one or two tasks on a node.
    Two queues, one of them preempting within itself by priority."""
    lines: list[dict[str, Any]] = [
        {
            "type": "ClusterConfigured",
            "ts": 0,
            "placement": draw(st.sampled_from(["binpack", "spread"])),
            "consolidation": True,
        }
    ]
    for name, quota in (("a", draw(st.integers(4, 24))), ("b", draw(st.integers(0, 8)))):
        lines.append(
            {
                "type": "QueueConfigured",
                "ts": 0,
                "queue": name,
                "resources": {"gpu": {"quota": quota, "limit": -1}},
                "preemption": {"within_queue": name == "a"},
            }
        )
    for index in range(draw(st.integers(2, 5))):
        gpus = draw(st.sampled_from([4, 8]))
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index}", "capacity": {"gpu": gpus}}
        )
    ts = 0
    for index in range(draw(st.integers(3, 16))):
        ts += draw(st.sampled_from([0, 1000, 2000]))
        late = index >= 4 and draw(st.booleans())
        gpu = draw(st.sampled_from([2, 4, 8] if late else [1, 1, 2, 3]))
        line: dict[str, Any] = {
            "type": "JobSubmitted",
            "ts": ts,
            "job": f"j{index}",
            "queue": draw(st.sampled_from(["a", "a", "b"])),
            "priority": draw(st.integers(1, 9)),
            "tasks": draw(st.sampled_from([1, 1, 2])),
            "resources": {"gpu": gpu},
            "duration_s": draw(st.integers(1, 20)),
        }
        if draw(st.integers(0, 5)) == 0:
            line["preemptible"] = False
        lines.append(line)
    return lines


class SlowStops(Simulator):
    """The simulator, but its agents report a preempted task gone only STOP_MS later: the
    preemptors wait for their victims across cycles, as they do on a real cluster."""

    STOP_MS = 3000

    def __init__(self) -> None:
        super().__init__()
        self._late: list[tuple[int, int, NodeCommand]] = []  # (due, order, Preempt)
        self._told = 0  # Preempts held back so far: their order among equal due times

    def _answer(self, ts: int, command: NodeCommand) -> None:
        if isinstance(command, Preempt) and command.node not in self._down:
            self._told += 1
            heapq.heappush(self._late, (ts + self.STOP_MS, self._told, command))
            return
        super()._answer(ts, command)

    def _next_moment(self) -> int | None:
        moment = super()._next_moment()
        if self._late and (moment is None or self._late[0][0] < moment):
            return self._late[0][0]
        return moment

    def _keep_nodes_alive(self, ts: int) -> None:
        super()._keep_nodes_alive(ts)
        while self._late and self._late[0][0] <= ts:
            super()._answer(ts, heapq.heappop(self._late)[2])


def slow_stops(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(SlowStops().run(orjson.dumps(line) for line in lines))


def _trying_every_resident() -> Any:
    return mock.patch.object(Landing, "could_land", lambda self, resident, tasks: True)


def _planning_on_every_node() -> Any:
    return mock.patch.object(consolidate, "some_node_could_grow", lambda state, job, landing: True)


def _placing_every_resident_afresh() -> Any:
    def place_off(
        self: Landing, resident: Any, target: str, locked: set[str], room: Any
    ) -> tuple[dict[str, int], int] | None:
        old = resident.placements
        return self._landed(resident, sum(old.values()), locked | set(old) | {target}, room)

    return mock.patch.object(Landing, "place_off", place_off)


def _trying_every_preemptor() -> Any:
    return mock.patch.object(Session, "still_waiting", lambda self, job: False)


@SETTINGS
@given(fragmented())
def test_passing_over_residents_with_nowhere_to_go_changes_no_command(
    lines: list[dict[str, Any]],
) -> None:
    with _trying_every_resident():
        tried = run(lines)[1]
    assert run(lines)[1] == tried


@SETTINGS
@given(fragmented())
def test_knowing_no_lift_could_help_before_planning_changes_no_command(
    lines: list[dict[str, Any]],
) -> None:
    with _planning_on_every_node():
        planned = run(lines)[1]
    assert run(lines)[1] == planned


@SETTINGS
@given(fragmented())
def test_where_a_shape_lands_off_a_node_kept_per_plan_changes_no_command(
    lines: list[dict[str, Any]],
) -> None:
    with _placing_every_resident_afresh():
        placed = run(lines)[1]
    assert run(lines)[1] == placed


@SETTINGS
@given(st.one_of(scenarios(), fragmented()))
def test_passing_over_preemptors_still_waiting_changes_no_command(
    lines: list[dict[str, Any]],
) -> None:
    with _trying_every_preemptor():
        tried = slow_stops(lines)
    assert slow_stops(lines) == tried


@SETTINGS
@given(fragmented(), st.sampled_from([3, indexes.REFILED_KEPT]))
def test_nodes_worth_lifting_kept_from_those_refiled_are_those_read_afresh(
    lines: list[dict[str, Any]], log_size: int
) -> None:
    """At every ask, the nodes kept with a job worth lifting (brought up to date from the
    log of refiled nodes, which a log of 3 starts again every few refilings) are those a
    read of every node finds, each with the same jobs, and the jobs listed once each, by
    landing group, are those jobs."""
    asks = 0
    kept_for = lifting._kept

    def checked(state: State, job: Job) -> LiftingKept:
        nonlocal asks
        asks += 1
        kept = kept_for(state, job)
        fresh = {}
        for each in state.nodes.values():
            node = dataclasses.replace(each, copies_memo={}, lifting_memo={})
            worth = lifting.worth_lifting(state, node, job.per_task, job.node_selector)
            if worth:
                fresh[each.id] = worth
        assert kept.by_node == fresh
        listed = Counter(job_id for worth in fresh.values() for job_id in worth)
        assert {job_id: count for job_id, (count, _) in kept.listed.items()} == listed
        groups: dict[object, set[str]] = {}
        for job_id in listed:
            asked = state.jobs[job_id]
            per_task = asked.per_task
            group = (per_task.gpu, per_task.cpu, per_task.memory, asked.node_selector)
            groups.setdefault(group, set()).add(job_id)
        assert {group: set(members) for group, members in kept.groups.items()} == groups
        return kept

    with (
        mock.patch.object(lifting, "_kept", checked),
        mock.patch.object(indexes, "REFILED_KEPT", log_size),
    ):
        run(lines)
    event(f"asked: {asks if asks < 3 else ' 3+'}")
