"""A queue whose release room is below the least request of its running jobs is not walked
for victims: the same commands and reasons as when every queue's victims are listed, and
the bound (`Queue.least_task`) is at most every running job's request after every cycle."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings

from domain.cycle import candidates
from domain.resources import Resources
from domain.state import State
from tests.domain.harness import Cluster, job, node, queue
from tests.domain.test_blocked_shapes import WatchedSimulator, simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_reclaim_properties import scenarios

NEVER = Resources(-(1 << 62), -(1 << 62), -(1 << 62))  # below any room: no queue skipped


class BoundChecked(WatchedSimulator):
    """Checks the bound after every cycle, besides noting why each job waits."""

    def _cycle_and_answer(self, ts: int) -> None:
        super()._cycle_and_answer(ts)
        for queue_ in self.state.queues.values():
            least = queue_.least_task
            if least is None:
                continue
            for job_id in queue_.running:
                asked = self.state.jobs[job_id].per_task
                assert least.gpu <= asked.gpu, (queue_.id, job_id)
                assert least.cpu <= asked.cpu, (queue_.id, job_id)
                assert least.memory <= asked.memory, (queue_.id, job_id)


@contextmanager
def every_queue_walked() -> Iterator[None]:
    """No queue skipped: the least request is taken to be below any room."""
    with mock.patch.object(State, "least_task", lambda state, queue_id: NEVER):
        yield


def assert_as_when_every_queue_is_walked(lines: list[dict[str, Any]]) -> None:
    skipping = simulate(lines, BoundChecked)
    with every_queue_walked():
        walked = simulate(lines, BoundChecked)
    assert skipping == walked


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_skipping_queues_by_their_least_request_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_queue_is_walked(lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_reclaim_with_moves_skipping_queues_changes_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    # Fragmented nodes and consolidation on: reclaim combined with moves lists victims too.
    assert_as_when_every_queue_is_walked(lines)


def over_by_one_gpu() -> Cluster:
    """A 3-GPU node that queue b fills with one 3-GPU job, one GPU above its fair share
    once queue a asks for one GPU."""
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=2), queue("b", gpu_quota=2), node("n1", gpu=3))
    cluster.when(1, job("big", "b", gpu=3))
    cluster.agents_obey()
    return cluster


def test_a_queue_that_may_release_less_than_any_of_its_jobs_asks_is_not_walked() -> None:
    # Given queue b one GPU above its fair share, running one 3-GPU job
    cluster = over_by_one_gpu()
    looked_at: list[str] = []
    real = candidates.first_tasks

    def counting(victim: Any) -> int:
        looked_at.append(victim.id)
        return real(victim)

    with mock.patch.object(candidates, "first_tasks", counting):
        # When queue a, below its deserved quota, asks for one GPU
        cluster.when(2, job("small", "a", gpu=1))
    # Then the fair-share reclaim never looked at b's job (b may release one GPU, and the
    # least its running jobs ask is three); the deserved-quota promise, which is not bound
    # by what b may release, stops it
    assert looked_at == []
    assert [(c.type, c.job, c.reason) for c in cluster.last] == [("Preempt", "big", "reclaim")]

    # And the commands and the reason are those given when b's victims are listed
    listed = over_by_one_gpu()
    with every_queue_walked(), mock.patch.object(candidates, "first_tasks", counting):
        listed.when(2, job("small", "a", gpu=1))
    assert looked_at == ["big"]
    assert listed.last == cluster.last
    assert listed.why("small") == cluster.why("small")
