"""A round-robin queue whose jobs were all found blocked is walked again by the first job of
each shape: the same commands, reasons and stops as when every job is stepped, and only
those first jobs stepped while nothing changes (given / when / then)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings

from domain.actions import allocate, settled_walk
from domain.cycle.framework import Cycle, QueuePolicy
from domain.cycle.statement import Statement
from domain.policies.round_robin import RoundRobin
from domain.state import Job, Queue
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_blocked_shapes import look_alike_backlogs, simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_reclaim_properties import scenarios


def round_robin(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same lines with every queue round robin."""
    return [
        line | {"policy": {"kind": "round_robin"}} if line["type"] == "QueueConfigured" else line
        for line in lines
    ]


@contextmanager
def every_job_stepped() -> Iterator[None]:
    with mock.patch.object(RoundRobin, "walk_settles", False):
        yield


@contextmanager
def settling_every_walk() -> Iterator[None]:
    """Queues of any length settle (the small ones here are below SETTLE_FROM)."""
    with mock.patch.object(settled_walk, "SETTLE_FROM", 0):
        yield


def assert_as_when_every_job_is_stepped(lines: list[dict[str, Any]]) -> None:
    with settling_every_walk():
        settled = simulate(lines)
    with every_job_stepped():
        stepped = simulate(lines)
    assert settled == stepped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(look_alike_backlogs())
def test_settled_walks_of_look_alike_backlogs_change_no_command_reason_or_stop(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_job_is_stepped(round_robin(lines))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_settled_walks_under_reclaim_change_no_command_reason_or_stop(
    lines: list[dict[str, Any]],
) -> None:
    # Quota trees, limits, labels, interactive and non-preemptible jobs: preemptors that
    # wait for their victims are stepped in every walk, settled or not.
    assert_as_when_every_job_is_stepped(round_robin(lines))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_settled_walks_with_consolidation_change_no_command_reason_or_stop(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_job_is_stepped(round_robin(lines))


class Steps:
    """Counts the jobs Allocate steps in each walk of a queue."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self._walk = settled_walk.walk

    def __call__(self, cycle: Cycle, queue_: Queue, policy: QueuePolicy) -> Iterator[Job]:
        for stepped in self._walk(cycle, queue_, policy):
            self.jobs.append(stepped.id)
            yield stepped


ONES, TWOS = 60, 20  # queue b's backlog: at least SETTLE_FROM jobs


def backlog_behind_a_full_node() -> Cluster:
    """A 4-GPU node that a 4-GPU job of queue a fills; queue b, round robin, waits with
    sixty one-GPU jobs and twenty two-GPU jobs, all blocked."""
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", gpu_quota=4),
        queue("b", gpu_quota=0, policy={"kind": "round_robin"}),
        node("n1", gpu=4),
    )
    cluster.given(0, job("big", "a", gpu=4, preemptible=False))
    cluster.agents_obey()
    backlog = [job(f"one{i:02d}", "b", gpu=1) for i in range(ONES)]
    backlog += [job(f"two{i:02d}", "b", gpu=2) for i in range(TWOS)]
    cluster.given(1000, *backlog)
    return cluster


def test_a_walk_that_found_every_job_blocked_steps_only_each_shapes_first_job_next_time() -> None:
    cluster = backlog_behind_a_full_node()
    steps = Steps()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(2000, job("late", "a", gpu=1))  # a cycle in which nothing can start

    assert sorted(steps.jobs) == ["late", "one00", "two00"]  # "late" in queue a, fifo
    assert {cluster.reason(f"one{i:02d}").text for i in range(ONES)} == {
        cluster.reason("one00").text
    }


def test_when_a_shapes_reason_changes_every_look_alike_is_given_the_new_reason() -> None:
    cluster = backlog_behind_a_full_node()
    before = cluster.reason("one07").text
    steps = Steps()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(2000, node("n2", gpu=0.5))  # too small for any job: the reason changes

    assert steps.jobs == ["one00", "two00"]
    assert cluster.reason("one07").text != before
    for index in range(ONES):
        assert cluster.reason(f"one{index:02d}") == cluster.reason("one00")
    for index in range(TWOS):
        assert cluster.reason(f"two{index:02d}") == cluster.reason("two00")


def test_a_look_alike_that_leaves_makes_the_next_walk_step_every_job() -> None:
    cluster = backlog_behind_a_full_node()
    steps = Steps()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(2000, event("JobCancelled", job="one05"))

    assert len(steps.jobs) == ONES + TWOS - 1  # every job left in queue b
    steps.jobs.clear()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(3000, job("late", "a", gpu=1))
    assert sorted(steps.jobs) == ["late", "one00", "two00"]


def test_when_room_frees_the_walk_goes_on_in_full_from_the_first_job_that_fits() -> None:
    cluster = backlog_behind_a_full_node()
    commands = cluster.finish(2000, "big")

    assert sorted(cluster.dispatched(commands)) == ["one00", "one01", "one02", "one03"]
    assert cluster.reason("one59").text == cluster.reason("one04").text


def test_a_statement_that_changes_a_look_alike_makes_the_next_walk_step_every_job() -> None:
    cluster = backlog_behind_a_full_node()
    statement = Statement(cluster.state)
    statement.set(cluster.job("one07"), "blocked_since", 1500)  # outside any walk

    steps = Steps()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(2000, job("late", "a", gpu=1))
    assert len(steps.jobs) == 1 + ONES + TWOS  # "late" and every job of queue b


def test_a_change_rolled_back_is_no_change_to_the_walk() -> None:
    cluster = backlog_behind_a_full_node()
    statement = Statement(cluster.state)
    checkpoint = statement.checkpoint()
    statement.set(cluster.job("one07"), "blocked_since", 1500)
    statement.rollback(checkpoint)
    statement.accept(statement.checkpoint())  # what is kept from here on: nothing

    steps = Steps()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(2000, job("late", "a", gpu=1))
    assert sorted(steps.jobs) == ["late", "one00", "two00"]


def test_a_queue_with_fewer_pending_jobs_than_settle_from_is_walked_in_full() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", gpu_quota=4),
        queue("b", gpu_quota=0, policy={"kind": "round_robin"}),
        node("n1", gpu=4),
    )
    cluster.given(0, job("big", "a", gpu=4, preemptible=False))
    cluster.agents_obey()
    cluster.given(1000, *(job(f"one{i:02d}", "b", gpu=1) for i in range(10)))

    steps = Steps()
    with mock.patch.object(allocate, "walk", steps):
        cluster.when(2000, job("late", "a", gpu=1))
    assert len(steps.jobs) == 11
