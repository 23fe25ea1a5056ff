"""Elasticity (Run:AI): shrink by halves to place, expand by doubling into spare capacity."""

from __future__ import annotations

from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, event, job, node, queue


def test_an_elastic_job_starts_small_and_doubles_when_a_node_joins() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=3))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=8, min_tasks=1))
    # 8 and 4 do not fit on 3 free GPUs; 2 does.
    assert [(c.job, c.tasks, c.reason) for c in cluster.last] == [("elastic", 2, "quota")]
    cluster.agents_obey()
    cluster.when(2, node("n2", gpu=8))
    expansions = [(c.node, c.tasks, c.reason, c.attempt) for c in cluster.last]
    # 2 -> 4 -> 8: each doubling is a Dispatch of the same attempt, fullest node first.
    assert expansions == [
        ("n1", 1, "expand", 1),
        ("n2", 1, "expand", 1),
        ("n2", 4, "expand", 1),
    ]
    assert cluster.job_view("elastic").placed_tasks == 8
    cluster.agents_obey()
    assert cluster.last == []  # at full size it never grows further


def test_halving_stops_at_min_tasks() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=2))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=8, min_tasks=3))  # tries 8, 4, 3
    assert cluster.last == []
    assert cluster.why("elastic")[0] is ReasonKind.CAPACITY
    assert cluster.why("elastic")[1]["tasks"] == 8
    cluster.when(2, node("n2", gpu=1))
    assert [c.tasks for c in cluster.last] == [2, 1]  # 3 tasks on 2 nodes


def test_expansion_never_goes_beyond_tasks() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=2))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=3, min_tasks=1))
    # 3 does not fit, 1 does (3 // 2 = 1); what is left lets it double at once to 2.
    assert [(c.tasks, c.reason) for c in cluster.last] == [(1, "quota"), (1, "expand")]
    cluster.when(2, node("n2", gpu=8))
    assert [(c.tasks, c.reason) for c in cluster.last] == [(1, "expand")]  # 2 -> 3, never 4
    assert cluster.job_view("elastic").placed_tasks == 3


def test_allocation_comes_before_expansion() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=2))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=4, min_tasks=1))
    cluster.when(2, job("waiting", "a", gpu=2))
    assert cluster.last == []
    cluster.when(3, node("n2", gpu=2))
    assert [(c.job, c.reason) for c in cluster.last] == [("waiting", "quota")]


def test_no_expansion_into_capacity_a_more_deprived_queue_waits_for() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), queue("b", gpu_quota=8), node("n1", gpu=2))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=4, min_tasks=1))
    # b's head asks for more than any node has, which stops b's fifo queue; what is behind it
    # waits, and b (using nothing) is more deprived than a.
    cluster.when(2, job("huge", "b", gpu=16), job("behind", "b", gpu=1))
    cluster.when(3, node("n2", gpu=2))
    assert cluster.last == []
    cluster.when(4, event("JobCancelled", job="huge"))
    assert [(c.job, c.reason) for c in cluster.last] == [("behind", "quota")]


def test_a_job_lost_with_its_node_does_not_expand_while_pending() -> None:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10), queue("a", gpu_quota=8))
    cluster.given(0, node("n1", gpu=2))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=4, min_tasks=1))
    cluster.when(11_000, event("Tick"))
    assert cluster.job_view("elastic").status == "pending"
    assert not cluster.job_view("elastic").placements


def test_under_reclaim_an_elastic_job_is_shrunk_instead_of_preempted_whole() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=2), queue("b", gpu_quota=2), node("n1", gpu=4))
    cluster.when(1, job("elastic", "a", gpu=1, tasks=4, min_tasks=1))
    assert [c.tasks for c in cluster.last] == [4]  # idle capacity beyond a's quota
    cluster.agents_obey()
    cluster.when(2, job("owed", "b", gpu=2))
    stops = [(c.job, c.tasks, c.reason, c.by) for c in cluster.last if c.type == "Preempt"]
    assert stops == [("elastic", 2, "shrink", "owed")]  # 4 -> 2 gives b its quota back
    cluster.agents_obey()
    assert cluster.dispatched() == ["owed"]
    assert (cluster.job_view("elastic").status, cluster.job_view("elastic").placed_tasks) == (
        "running",
        2,
    )


def test_no_expansion_into_limit_headroom_promised_to_a_preemptor() -> None:
    # Given a queue capped at 4 GPUs running v (2 x 1 GPU, priority 1), x (1 GPU) and the
    # elastic e at 1 of its 2 tasks (the limit kept it small),
    cluster = Cluster()
    capped = queue("q", gpu_quota=4, gpu_limit=4, preemption={"within_queue": True})
    cluster.given(0, capped, node("n1", gpu=4), node("n2", gpu=1))
    cluster.at(1, job("v", "q", gpu=1, tasks=2, priority=1), job("x", "q", gpu=1, priority=1))
    cluster.agents_obey(1)
    cluster.at(2, job("e", "q", gpu=1, tasks=2, min_tasks=1, priority=3))
    cluster.agents_obey(2)
    assert cluster.job_view("e").placements == (("n1", 1),)
    # when x ends and p (3 x 1 GPU, priority 2) comes in the same group, p takes v's room,
    x = cluster.job("x")
    ended = event("JobFinished", job="x", node="n1", attempt=x.attempt, outcome="succeeded")
    cluster.when(3, ended, job("p", "q", gpu=1, tasks=3, priority=2))
    # then e does not grow into the limit headroom that room needs once v stops,
    assert [(c.type, c.job) for c in cluster.last] == [("Preempt", "v"), ("Preempt", "v")]
    # and p runs as soon as v has stopped, the queue at its limit.
    cluster.agents_obey(3)
    assert [(c.type, c.job) for c in cluster.last] == [("Dispatch", "p")]
    assert cluster.queue_view("q").allocated.gpu == 4000
