"""A preemptor waiting for its victims is fitted as a job of its shape that holds nothing,
while no node it holds room on could take one of its tasks: the cycle's memo of shapes with
no room then answers for it (domain.cycle.fitting)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from domain import placement
from domain.cycle import fitting
from domain.reasons import ReasonKind, reason
from domain.snapshot import encode_state
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_blocked_shapes import look_alike_backlogs, simulate


def preemptor_waiting(gpu_limit: float = -1) -> Cluster:
    """`high` preempted `low` on the one 4-GPU node and holds its room while `low` stops."""
    cluster = Cluster()
    policy = {"kind": "round_robin"}
    cluster.given(
        0,
        queue("q", 4, gpu_limit, preemption={"within_queue": True}, policy=policy),
        node("n0", gpu=4),
    )
    cluster.given(0, job("low", "q", gpu=4, priority=1))
    cluster.agents_obey()
    cluster.given(1000, job("high", "q", gpu=4, priority=8))
    assert cluster.preempted(cluster.commands) == ["low"]
    return cluster


def counting_placements() -> tuple[list[str], Any]:
    placed: list[str] = []
    real = placement.find_placement

    def find_placement(state: Any, job: Any, *args: Any, **kwargs: Any) -> Any:
        placed.append(job.id)
        return real(state, job, *args, **kwargs)

    return placed, mock.patch.object(fitting, "find_placement", find_placement)


def test_a_preemptor_whose_victim_still_runs_shares_its_shapes_verdict() -> None:
    # Given a preemptor waiting for its victim to stop, in a queue with a limit (so it is
    # tried in full, never parked: domain/cycle/parked.py)
    cluster = preemptor_waiting(gpu_limit=12)
    searched, counting = counting_placements()
    with counting:
        # When a look-alike arrives before the victim has stopped
        cluster.when(2000, job("high-2", "q", gpu=4, priority=8))
    # Then one search for nodes answered both: the preemptor's held room is not free yet
    assert searched == ["high"]
    assert cluster.last == []


def preemptor_of_two_tasks_waiting(min_tasks: int) -> Cluster:
    """`high` (two 4-GPU tasks, at least `min_tasks`) preempted `low0` on n0 and `low1` on
    n1 and holds their room while they stop."""
    cluster = Cluster()
    cluster.given(
        0,
        queue("q", gpu_quota=8, preemption={"within_queue": True}, policy={"kind": "round_robin"}),
        node("n0", gpu=4),
        node("n1", gpu=4),
    )
    cluster.given(0, job("low0", "q", gpu=4, priority=1), job("low1", "q", gpu=4, priority=1))
    cluster.agents_obey()
    cluster.given(1000, job("high", "q", gpu=4, tasks=2, min_tasks=min_tasks, priority=5))
    assert sorted(cluster.preempted(cluster.commands)) == ["low0", "low1"]
    return cluster


def test_a_preemptor_one_of_whose_victims_stopped_uses_the_room_held_there() -> None:
    # Given an elastic preemptor (two 4-GPU tasks, at least one) waiting for its two victims,
    # one per node, and a job of one such task, of higher priority, that finds no room
    cluster = preemptor_of_two_tasks_waiting(min_tasks=1)
    cluster.given(1500, job("first", "q", gpu=4, priority=9))

    # When one victim stops: `first` is tried before the preemptor and finds no room
    cluster.when(2000, event("JobPreempted", job="low0", node="n0", attempt=1))

    # Then the preemptor runs one task on the room held for it there
    assert [(c.job, c.node, c.tasks) for c in cluster.last if c.type == "Dispatch"] == [
        ("high", "n0", 1)
    ]


def test_a_preemptor_keeps_naming_only_the_victims_it_still_waits_for() -> None:
    # Given a preemptor of two 4-GPU tasks waiting for its two victims, one per node
    cluster = preemptor_of_two_tasks_waiting(min_tasks=2)
    cluster.given(1500, job("other", "q", gpu=4, priority=1))  # a cycle: still both awaited

    # When one victim stops, and the preemptor still waits for the other
    cluster.when(2000, event("JobPreempted", job="low0", node="n0", attempt=1))

    # Then the reason kept for it (what a snapshot carries) names only the other
    assert cluster.last == []
    jobs = dict(orjson.loads(encode_state(cluster.state))["state"]["jobs"])
    kept = jobs["high"]["pending_reason"]
    assert kept["kind"] == "preempting"
    assert kept["facts"] == {"awaiting": ["low1"]}


def summing_promised_room() -> tuple[list[int], Any]:
    sums: list[int] = []
    real = fitting.Fitter._promised_sums

    def promised_sums(state: Any) -> Any:
        sums.append(state.hold_changes)
        return real(state)

    return sums, mock.patch.object(fitting.Fitter, "_promised_sums", staticmethod(promised_sums))


def test_room_promised_to_preemptors_is_summed_again_only_after_a_hold_changes() -> None:
    # Given a preemptor holding room on n0 in a queue with a limit (which room promised to
    # preemptors counts against), and room for three jobs (not for it) on n1
    cluster = preemptor_waiting(gpu_limit=12)
    cluster.given(1500, node("n1", gpu=3))
    sums, counting = summing_promised_room()
    with counting:
        # When three jobs that hold nothing arrive together
        cluster.when(2000, *(job(f"j{i}", "q", gpu=1, priority=1) for i in range(3)))
    # Then all three run on n1, and the promised room was summed once: a dispatch of a job
    # that holds nothing changes no hold
    assert sorted(cluster.dispatched(cluster.last)) == ["j0", "j1", "j2"]
    assert len(sums) == 1


def test_room_promised_to_preemptors_is_not_summed_where_nothing_could_breach() -> None:
    # Given a preemptor holding room on n0 in a queue with no limit, and room on n1
    cluster = preemptor_waiting()
    cluster.given(1500, node("n1", gpu=3))
    sums, counting = summing_promised_room()
    with counting:
        # When three preemptible jobs arrive
        cluster.when(2000, *(job(f"j{i}", "q", gpu=1, priority=1) for i in range(3)))
    # Then all three run, and no sum was made: no limit on the way up, and no
    # non-preemptible quota check, can count room held for others
    assert sorted(cluster.dispatched(cluster.last)) == ["j0", "j1", "j2"]
    assert sums == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(look_alike_backlogs())
def test_waiting_preemptors_get_the_commands_and_reasons_of_full_searches(
    lines: list[dict[str, Any]],
) -> None:
    shared = simulate(lines)
    with mock.patch.object(fitting, "_held_room_now", lambda state, job: True):
        searched = simulate(lines)  # every preemptor searched for on its own
    assert shared == searched


def test_a_waiting_preemptor_takes_room_that_appears_elsewhere_before_its_victim_stops() -> None:
    # Given a preemptor waiting for its victim to stop, and a cycle that changes nothing for it
    cluster = preemptor_waiting()
    cluster.when(1500, job("other", "q", gpu=4, priority=1))
    assert cluster.last == []
    assert cluster.job_view("high").awaiting == ("low",)
    # When a node with room for it joins before the victim has stopped
    cluster.when(2000, node("n1", gpu=4))
    # Then it runs there at once
    assert [(c.type, c.job, c.node) for c in cluster.last] == [("Dispatch", "high", "n1")]


def test_a_preemptor_waits_for_its_victims_from_the_cycle_that_preempted_them() -> None:
    # Given `high` preempting `low` for the one 4-GPU node, in the cycle that folds it
    cluster = preemptor_waiting()

    # Then the reason kept for it already names its victim, as its tries give while it
    # waits: a later cycle may pass it over (`Session.still_waiting`), its reason kept
    jobs = dict(orjson.loads(encode_state(cluster.state))["state"]["jobs"])
    kept = jobs["high"]["pending_reason"]
    assert kept["kind"] == "preempting"
    assert kept["facts"] == {"awaiting": ["low"]}
    assert kept["text"] == "waiting for preempted jobs to stop: low"


@pytest.mark.parametrize(
    ("named", "awaited", "held"),
    [
        (("low",), {"low"}, True),
        (("low",), {"other"}, False),
        (("a", "b"), {"b", "a"}, True),
        (("a", "b"), {"a"}, False),
        (("a",), {"a", "b"}, False),
        (("b", "a"), {"a", "b"}, False),  # not as waiting_reason writes them: sorted
        (["low"], {"low"}, False),  # not a tuple, so not the facts waiting_reason makes
    ],
)
def test_a_waiting_reason_is_held_only_for_exactly_the_victims_awaited(
    named: Any, awaited: set[str], held: bool
) -> None:
    # Given a preemptor whose reason names some victims, and the victims it awaits
    preemptor = preemptor_waiting().state.jobs["high"]
    preemptor.pending_reason = reason(
        ReasonKind.PREEMPTING, "waiting for preempted jobs to stop", awaiting=named
    )
    preemptor.awaiting = frozenset(awaited)

    # Then the reason counts as held (a try would give it again) only for the same victims
    assert (fitting.waiting_reason_held(preemptor) is preemptor.pending_reason) is held
    if held:
        assert fitting.waiting_reason(preemptor) is preemptor.pending_reason
