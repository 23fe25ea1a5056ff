"""Victims listed from memory are listed as if read afresh: the same commands (pure core)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.cycle import candidates
from domain.cycle.room import VictimStep
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_blocked_shapes import look_alike_backlogs, simulate
from tests.domain.test_preemption_properties import scenarios


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(look_alike_backlogs(), scenarios()))
def test_victims_listed_from_memory_are_listed_as_if_read_afresh(
    lines: list[dict[str, Any]],
) -> None:
    # Given any cluster whose jobs preempt, shrink, end and start again
    # When it is simulated with the listing memo kept across searches and cycles
    remembered = simulate(lines)
    # Then every command is the one a listing that reads every victim afresh gives
    with mock.patch.object(candidates, "listed_memo", lambda state: candidates.ListedVictims()):
        afresh = simulate(lines)
    assert remembered == afresh


def test_a_victim_listed_again_after_it_grew_is_listed_as_it_runs_now() -> None:
    # Given elastic e (8 one-GPU tasks, min 2, priority 1) running 4 tasks on n0, listed by
    # the search of p0 (priority 1, so e is no victim for it); then p0 is cancelled and e
    # grows onto n1
    cluster = Cluster()
    within_queue = {"within_queue": True}
    cluster.when(
        0,
        queue("q", gpu_quota=8, preemption=within_queue),
        node("n0", gpu=4),
        job("e", "q", gpu=1, tasks=8, min_tasks=2, priority=1),
    )
    cluster.agents_obey()
    cluster.given(1000, job("p0", "q", gpu=2, priority=1))
    cluster.when(2000, event("JobCancelled", job="p0"), node("n1", gpu=4))
    assert [(c.type, c.job, c.node) for c in cluster.last] == [("Dispatch", "e", "n1")]
    cluster.agents_obey()

    # When p2 (priority 5, one task of 4 GPUs) finds no node with room for it
    cluster.when(3000, job("p2", "q", gpu=4, priority=5))

    # Then e gives up half its tasks, those on n0, as it runs now: not all it ran before
    assert [(c.type, c.job, c.node, c.tasks, c.reason) for c in cluster.last] == [
        ("Preempt", "e", "n0", 4, "shrink")
    ]


def test_a_victim_listed_again_after_it_started_again_is_ordered_by_its_new_start() -> None:
    # Given a (priority 1, started at 0, one retry) and b (priority 1, started at 500), each
    # one GPU on n0, listed by the search of p0 (priority 1, so neither is its victim); then
    # p0 is cancelled, a fails, and its retry starts at 1500 on n0 again
    cluster = Cluster()
    within_queue = {"within_queue": True}
    cluster.when(
        0,
        queue("q", gpu_quota=2, preemption=within_queue),
        node("n0", gpu=2),
        job("a", "q", gpu=1, priority=1, max_retries=1),
    )
    cluster.agents_obey()
    cluster.when(500, job("b", "q", gpu=1, priority=1))
    cluster.agents_obey()
    cluster.given(1000, job("p0", "q", gpu=1, priority=1))
    failed = event("JobFinished", job="a", node="n0", attempt=1, outcome="failed")
    cluster.when(1200, event("JobCancelled", job="p0"), failed)
    assert [(c.type, c.job, c.node) for c in cluster.last] == [("Dispatch", "a", "n0")]
    cluster.agents_obey(1500)

    # When p2 (priority 5, one GPU) finds n0 full
    cluster.when(2000, job("p2", "q", gpu=1, priority=5))

    # Then it stops a, the one started most recently now
    assert [(c.type, c.job, c.reason) for c in cluster.last] == [("Preempt", "a", "priority")]


class _LeastDisruption:
    """The one thing listing asks of a search to read a victim: its steps' order."""

    def step_order(self, step: VictimStep) -> tuple[int, int, int, str, int]:
        return (step.victim.priority, int(not step.shrink), 0, step.victim.id, step.index)


def test_victims_that_ended_are_not_kept_once_the_memo_doubles() -> None:
    # Given 1,000 one-GPU jobs running on n0, each listed as a victim
    cluster = Cluster()
    first = [f"a{i:04d}" for i in range(1000)]
    cluster.when(0, queue("q", gpu_quota=2000), node("n0", gpu=2000), *[job(j, "q") for j in first])
    cluster.agents_obey()
    memo, search = candidates.ListedVictims(), _LeastDisruption()
    for job_id in first:
        candidates.list_victim(cluster.state, memo, search, cluster.job(job_id), cluster.ts)

    # When all but ten of them end, and 1,000 more run and are listed
    ended = [
        event("JobFinished", job=j, node="n0", attempt=1, outcome="succeeded") for j in first[10:]
    ]
    second = [f"b{i:04d}" for i in range(1000)]
    cluster.when(1000, *ended, *[job(j, "q") for j in second])
    cluster.agents_obey()
    for job_id in second:
        candidates.list_victim(cluster.state, memo, search, cluster.job(job_id), cluster.ts)

    # Then no job that ended is kept, and at most twice the running jobs are
    kept = set(memo.entries)
    assert not kept & set(first[10:])
    assert len(kept) <= 2 * 1010
    assert set(second) <= kept


def test_a_victim_not_started_yet_is_ordered_as_if_it_started_in_each_cycle_it_is_listed() -> None:
    # Given on n0 (3 GPUs): a (started at 0), u (dispatched at 500, never started) and x,
    # all priority 1, listed by the search of p0 (priority 1) at 1000; then p0 is cancelled,
    # x ends, and b (priority 1) starts at 1500 in its place
    cluster = Cluster()
    within_queue = {"within_queue": True}
    cluster.when(
        0,
        queue("q", gpu_quota=3, preemption=within_queue),
        node("n0", gpu=3),
        job("a", "q", gpu=1, priority=1),
        job("x", "q", gpu=1, priority=1),
    )
    cluster.agents_obey()
    cluster.given(500, job("u", "q", gpu=1, priority=1))
    cluster.given(1000, job("p0", "q", gpu=1, priority=1))
    ended = event("JobFinished", job="x", node="n0", attempt=1, outcome="succeeded")
    cluster.when(1200, event("JobCancelled", job="p0"), ended, job("b", "q", priority=1))
    assert cluster.dispatched() == ["b"]
    cluster.agents_obey(1500)

    # When p2 (priority 5, one GPU) finds n0 full at 2000
    cluster.when(2000, job("p2", "q", gpu=1, priority=5))

    # Then it stops u, taken as started now (2000), after b (1500): not as of 1000
    assert [(c.type, c.job, c.reason) for c in cluster.last] == [("Preempt", "u", "priority")]
