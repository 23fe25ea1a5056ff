"""Claim looks again only at the preemptors one of whose victims stopped since it last looked
(or that it has not looked at): the same commands and reasons as when it looks at every
holder in every cycle (given / when / then)."""

from __future__ import annotations

import contextlib
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings

from domain.actions import claim
from domain.actions.claim import Claim
from domain.cycle import awaiting
from domain.snapshot import decode_state, encode_state
from domain.state import State
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_blocked_shapes import WatchedSimulator, look_alike_backlogs, simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_reclaim_properties import scenarios
from tests.domain.test_waiting_preemptor_fit import preemptor_of_two_tasks_waiting


class LookingAtEveryHolder(WatchedSimulator):
    """Claim has checked no holder before any cycle, so it looks at every one."""

    def _cycle_and_answer(self, ts: int) -> None:
        self.state.awaiting_checked.clear()
        super()._cycle_and_answer(ts)


def assert_as_when_claim_looks_at_every_holder(lines: list[dict[str, Any]]) -> None:
    assert simulate(lines) == simulate(lines, LookingAtEveryHolder)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_claims_looks_under_reclaim_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_claim_looks_at_every_holder(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(look_alike_backlogs())
def test_claims_looks_under_priority_preemption_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_claim_looks_at_every_holder(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_claims_looks_under_consolidation_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    # Consolidation's moves are awaited too: a moved job's old tasks stop.
    assert_as_when_claim_looks_at_every_holder(lines)


def victims_looked_at() -> tuple[list[str], Any]:
    """Notes each victim whose stop the cycle looks at (domain/cycle/awaiting.py)."""
    looked: list[str] = []
    real = awaiting.still_stopping

    def still_stopping(state: State, job_id: str) -> bool:
        looked.append(job_id)
        return real(state, job_id)

    return looked, mock.patch.object(awaiting, "still_stopping", still_stopping)


def test_a_preemptor_none_of_whose_victims_stopped_is_not_looked_at_by_claim_again() -> None:
    # Given a preemptor of two 4-GPU tasks waiting for its two victims, looked at once
    cluster = preemptor_of_two_tasks_waiting(min_tasks=2)
    cluster.given(1500, job("other", "q", gpu=4, priority=1))

    # When a cycle runs in which neither victim has stopped
    looked, counting = victims_looked_at()
    with counting:
        cluster.when(2000, job("another", "q", gpu=4, priority=1))

    # Then neither Claim nor its own try in Allocate looked at its victims again
    assert looked == []


def test_a_preemptor_whose_victim_stopped_is_looked_at_and_placed_once_both_stopped() -> None:
    # Given a preemptor of two 4-GPU tasks waiting for its two victims, looked at once
    cluster = preemptor_of_two_tasks_waiting(min_tasks=2)
    cluster.given(1500, job("other", "q", gpu=4, priority=1))

    # When one victim stops, then the other
    looked, counting = victims_looked_at()
    with counting:
        cluster.when(2000, event("JobPreempted", job="low0", node="n0", attempt=1))
        assert set(looked) == {"low0", "low1"}  # one of its victims stopped
        cluster.when(3000, event("JobPreempted", job="low1", node="n1", attempt=1))

    # Then Claim places it on the room held for it
    assert sorted((c.job, c.node) for c in cluster.last if c.type == "Dispatch") == [
        ("high", "n0"),
        ("high", "n1"),
    ]


def test_a_loaded_state_has_claim_look_at_every_preemptor() -> None:
    # Given a preemptor waiting, and the state written and read back (as on a restart)
    cluster = preemptor_of_two_tasks_waiting(min_tasks=2)
    cluster.given(1500, job("other", "q", gpu=4, priority=1))
    cluster.state = decode_state(encode_state(cluster.state))

    # When a cycle runs in which neither victim has stopped
    looked, counting = victims_looked_at()
    with counting:
        cluster.when(2000, job("another", "q", gpu=4, priority=1))

    # Then its victims were looked at: nothing says they were
    assert set(looked) == {"low0", "low1"}


def holders_claim_steps() -> tuple[list[str], Any]:
    """Notes each holder Claim steps: each `refresh` (domain/cycle/awaiting.py) asked while
    Claim runs (Allocate's tries ask it too)."""
    stepped: list[str] = []
    claiming = [False]
    real_refresh, real_execute = awaiting.refresh, Claim.execute

    def refresh(state: State, statement: Any, job: Any) -> None:
        if claiming[0]:
            stepped.append(job.id)
        real_refresh(state, statement, job)

    def execute(self: Claim, cycle: Any) -> None:
        claiming[0] = True
        try:
            real_execute(self, cycle)
        finally:
            claiming[0] = False

    patches = contextlib.ExitStack()
    patches.enter_context(mock.patch.object(awaiting, "refresh", refresh))
    patches.enter_context(mock.patch.object(Claim, "execute", execute))
    return stepped, patches


def two_queues_each_with_a_preemptor_waiting() -> Cluster:
    """`high_a` in qa waits for `low_a` to stop on na; `high_b` in qb for `low_b` on nb."""
    cluster = Cluster()
    for name in ("a", "b"):
        cluster.given(
            0,
            queue(f"q{name}", gpu_quota=4, preemption={"within_queue": True}),
            node(f"n{name}", gpu=4, labels={"pool": name}),
        )
        cluster.given(0, job(f"low_{name}", f"q{name}", gpu=4, priority=1, **selector_of(name)))
    cluster.agents_obey()
    for name in ("a", "b"):
        cluster.given(1000, job(f"high_{name}", f"q{name}", gpu=4, priority=5, **selector_of(name)))
    assert sorted(cluster.preempted(cluster.commands)) == ["low_a", "low_b"]
    return cluster


def selector_of(name: str) -> dict[str, Any]:
    return {"node_selector": {"pool": name}}


def test_claim_steps_only_the_holder_whose_victim_stopped() -> None:
    # Given two preemptors, each waiting for its own victim, both looked at by Claim once
    cluster = two_queues_each_with_a_preemptor_waiting()
    cluster.given(1500, job("other", "qa", gpu=1, priority=1))

    # When a cycle runs in which neither victim stopped, then one in which low_b stopped
    stepped, counting = holders_claim_steps()
    with counting:
        cluster.when(2000, job("another", "qa", gpu=1, priority=1))
        quiet = list(stepped)
        stepped.clear()
        cluster.when(3000, event("JobPreempted", job="low_b", node="nb", attempt=1))

    # Then the first cycle stepped no holder, the second only high_b, which is placed
    assert quiet == []
    assert stepped == ["high_b"]
    assert [(c.job, c.node) for c in cluster.last if c.type == "Dispatch"] == [("high_b", "nb")]


def test_claim_steps_every_holder_once_too_many_awaited_sets_to_note() -> None:
    # Given two preemptors, each waiting for its own victim, both looked at by Claim once,
    # and room to note only one job whose awaited victims were set
    cluster = two_queues_each_with_a_preemptor_waiting()
    cluster.given(
        1500,
        queue("qc", gpu_quota=4, preemption={"within_queue": True}),
        node("nc", gpu=4, labels={"pool": "c"}),
        job("low_c", "qc", gpu=4, priority=1, **selector_of("c")),
    )
    stepped, counting = holders_claim_steps()
    with counting, mock.patch.object(claim, "STOPS_ENDED_MAX", 1):
        # When a cycle sets a third preemptor's awaited victims, and the next cycle runs
        cluster.when(2000, job("high_c", "qc", gpu=4, priority=5, **selector_of("c")))
        assert cluster.preempted(cluster.last) == ["low_c"]
        stepped.clear()
        cluster.when(3000, job("another", "qa", gpu=1, priority=1))

    # Then that next Claim stepped every holder, not one known to wait
    assert set(stepped) >= {"high_a", "high_b"}
