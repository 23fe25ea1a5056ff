"""Reclaim with moves plans nothing when the free room and all its candidate queues may
release could not hold the job: the same commands and reasons as when every plan judges
its victims (`reclaim_moves.could_free_enough`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings

from domain.actions import reclaim_moves
from domain.cycle.session import Session
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_blocked_shapes import simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_reclaim_properties import scenarios


@contextmanager
def every_plan_judged() -> Iterator[None]:
    """The bound never ends a plan: every plan judges and takes victims as before it."""
    with mock.patch.object(reclaim_moves, "could_free_enough", lambda *args: True):
        yield


def assert_as_when_every_plan_is_judged(lines: list[dict[str, Any]]) -> None:
    bounded = simulate(lines)
    with every_plan_judged():
        judged = simulate(lines)
    assert bounded == judged


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_plans_bounded_by_what_may_be_freed_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_plan_is_judged(lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_plans_bounded_in_reclaim_scenarios_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_plan_is_judged(lines)


def one_gpu_to_spare() -> Cluster:
    """Eight GPUs on two nodes. Queue b (deserved 1) runs one 2-GPU job: one GPU above its
    share, less than any of its jobs. Queue c (deserved 3) runs four 1-GPU jobs: one above.
    Two GPUs are free, one on each node."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", consolidation=True, placement="binpack"),
        queue("a", gpu_quota=4),
        queue("b", gpu_quota=1),
        queue("c", gpu_quota=3),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    cluster.given(1, job("b1", "b", gpu=2), *(job(f"c{i}", "c", gpu=1) for i in range(4)))
    cluster.agents_obey()
    return cluster


@contextmanager
def judged_by_plans() -> Iterator[list[str]]:
    """The victims reclaim with moves judges (`may_be_victim` asked while `_plan` runs)."""
    judged: list[str] = []
    planning = [False]
    real_plan, real_judge = reclaim_moves._plan, Session.may_be_victim

    def plan(cycle: Any, job: Any, rule: Any) -> Any:
        planning[0] = True
        try:
            return real_plan(cycle, job, rule)
        finally:
            planning[0] = False

    def may_be_victim(self: Session, job: Any, victim: Any, rule: Any) -> bool:
        if planning[0]:
            judged.append(victim.id)
        return real_judge(self, job, victim, rule)

    with (
        mock.patch.object(reclaim_moves, "_plan", plan),
        mock.patch.object(Session, "may_be_victim", may_be_victim),
    ):
        yield judged


def big_arrives(bounded: bool) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Queue a, below its deserved quota, asks for four GPUs on one node: the commands, and
    the victims reclaim with moves judged."""
    cluster = one_gpu_to_spare()
    with (
        judged_by_plans() as judged,
        contextlib.nullcontext() if bounded else every_plan_judged(),
    ):
        cluster.when(2, job("big", "a", gpu=4))
    issued: list[tuple[str, str, str, str]] = [
        (c.type, c.job, c.node, getattr(c, "reason", "")) for c in cluster.last
    ]
    return issued, judged


def test_a_plan_that_could_not_free_enough_judges_no_victim() -> None:
    # Given two free GPUs, one on each node, and queues b and c one GPU above their shares
    # When queue a, below its deserved quota, asks for four GPUs on one node
    issued, judged = big_arrives(bounded=True)
    # Then the fair-share plan judged none of c's jobs: the two free GPUs and the one c may
    # release are not four (b may release less than its one job asks)
    assert judged == []
    # Without the bound, that plan judges c's jobs, to find nothing all the same
    issued_when_judged, judged = big_arrives(bounded=False)
    assert sorted(set(judged)) == ["c0", "c1", "c2", "c3"]
    # and both issue the same: reclaim by deserved quota then frees n2
    expected = [("Preempt", "c2", "n2", "reclaim"), ("Preempt", "c3", "n2", "reclaim")]
    assert issued == issued_when_judged == expected
