"""Walking-skeleton behaviour of the pure core: fifo, quota and limit, binpack, gang, node loss."""

from __future__ import annotations

from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, event, job, node, queue


def test_gang_job_is_placed_whole_or_not_at_all() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=4), node("n2", gpu=4))
    cluster.when(1, job("big", "a", gpu=2, tasks=5))
    assert cluster.dispatched() == []
    assert cluster.why("big")[0] is ReasonKind.CAPACITY
    cluster.when(2, node("n3", gpu=2))
    assert sorted((c.node, c.tasks) for c in cluster.last) == [("n1", 2), ("n2", 2), ("n3", 1)]
    assert {c.seq for c in cluster.last} == {cluster.seq}


def test_binpack_fills_the_fullest_node_that_fits() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=8), node("n2", gpu=8))
    cluster.when(1, job("first", "a", gpu=6))
    cluster.when(2, job("second", "a", gpu=2))
    first, second = cluster.commands
    assert second.node == first.node


def test_fifo_blocked_head_stops_the_queue() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=4))
    cluster.when(1, job("head", "a", gpu=8), job("small", "a", gpu=1))
    assert cluster.dispatched() == []
    assert cluster.queue_view("a").stopped_by == "head"


def test_limit_blocks_and_quota_sets_the_dispatch_reason() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=2, gpu_limit=3), node("n1", gpu=8))
    cluster.when(
        1, job("in-quota", "a", gpu=2), job("over", "a", gpu=1), job("too-far", "a", gpu=1)
    )
    assert [(c.job, c.reason) for c in cluster.last] == [
        ("in-quota", "quota"),
        ("over", "over_quota"),
    ]
    assert cluster.why("too-far")[0] is ReasonKind.LIMIT


def test_lost_node_requeues_its_jobs_keeping_their_place() -> None:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10), queue("a", gpu_quota=8))
    cluster.given(0, node("n1", gpu=1))
    cluster.when(1000, job("early", "a"), job("late", "a"))
    assert cluster.dispatched() == ["early"]
    cluster.when(11_000, event("Tick"))
    assert cluster.job_view("early").status == "pending"
    cluster.when(12_000, node("n1", gpu=1))
    assert cluster.dispatched() == ["early"]
    assert cluster.last[0].attempt == 2


def test_stale_attempt_reports_change_nothing() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    cluster.when(1, job("j", "a"))
    cluster.when(2, event("JobFinished", job="j", node="n1", attempt=7, outcome="succeeded"))
    assert cluster.job_view("j").status == "running"
    assert cluster.rejections == []


def test_unknown_queue_and_job_are_refused_with_reasons() -> None:
    cluster = Cluster()
    cluster.given(0, node("n1"))
    cluster.when(1, job("j", "missing"), event("JobCancelled", job="ghost"))
    reasons = [reason for _, reason in cluster.rejections]
    assert reasons == ["queue 'missing' does not exist", "job 'ghost' does not exist"]


def test_cancel_while_a_shrink_is_stopping_releases_every_task() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=0), queue("b", gpu_quota=4), node("n1", gpu=4))
    cluster.when(1, job("elastic", "a", tasks=4, min_tasks=1))
    cluster.agents_obey()
    cluster.when(2, job("owner", "b", gpu=2))
    assert [(c.job, c.reason, c.tasks) for c in cluster.last] == [("elastic", "shrink", 2)]
    cluster.when(3, event("JobCancelled", job="elastic"))
    assert [(c.job, c.reason, c.tasks) for c in cluster.last] == [("elastic", "cancelled", 2)]
    # Both stops on n1 are one entry of four tasks.
    assert cluster.node_view("n1").stopping.gpu == 4000
    assert cluster.job_view("elastic").stopping == (("n1", 4),)
    cluster.when(4, event("JobPreempted", job="elastic", node="n1", attempt=1))
    assert cluster.job_view("elastic").status == "cancelled"
    assert cluster.dispatched() == ["owner"]
    node_now = cluster.node_view("n1")
    assert node_now.allocated.gpu == 2000 and node_now.stopping.gpu == 0


def test_lost_node_stops_the_rest_of_a_gang_and_of_an_elastic_job_below_min_tasks() -> None:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=10), queue("a", gpu_quota=16))
    cluster.given(0, *(node(f"n{i}", gpu=1) for i in range(1, 9)))
    cluster.when(
        1,
        job("gang", "a", tasks=2),
        job("elastic", "a", tasks=4, min_tasks=3),
        job("flexible", "a", tasks=2, min_tasks=1),
    )
    placed: dict[str, set[str]] = {c.job: set() for c in cluster.last}
    for command in cluster.last:
        placed[command.job].add(command.node)
    assert {job_id: len(nodes) for job_id, nodes in placed.items()} == {
        "gang": 2,
        "elastic": 4,
        "flexible": 2,
    }
    # Each job loses half its nodes: the others keep beating.
    survivors = [n for nodes in placed.values() for n in sorted(nodes)[: len(nodes) // 2]]
    cluster.when(5_000, *(node(n, gpu=1) for n in survivors))
    cluster.when(10_001, event("Tick"))
    assert {(c.job, c.reason) for c in cluster.last} == {
        ("elastic", "node_lost"),
        ("gang", "node_lost"),
    }
    assert cluster.job_view("flexible").placed_tasks == 1  # at min_tasks it runs on


def test_simulate_stamps_an_invalid_line_with_its_own_time_in_file_order() -> None:
    from tests.domain.harness import simulate

    output = simulate(
        {"type": "QueueConfigured", "queue": "a", "ts": 0},
        {"type": "NodeHeartbeat", "node": "n1", "capacity": {"gpu": 1}, "ts": 0},
        {"type": "JobSubmitted", "job": "bad", "queue": "a", "extra": 1, "ts": 10},
        {"type": "JobSubmitted", "job": "good", "queue": "a", "ts": 10},
        {"type": "JobSubmitted", "job": "late", "queue": "a", "extra": 1, "ts": 5},
        {"type": "JobSubmitted", "job": "behind", "queue": "a", "ts": 7},
    )
    assert [(o["type"], o["ts"]) for o in output] == [
        ("Rejected", 10),
        ("Dispatch", 10),
        ("Rejected", 10),  # before the simulation's time: refused at once, at that time
        ("Rejected", 10),
    ]
    assert "extra: unknown field" in output[0]["reason"]
    assert "extra: unknown field" in output[2]["reason"]
    assert "ts 7 is before the simulation's current time 10" in output[3]["reason"]


def test_simulate_prints_a_line_refused_for_its_time_once_before_the_next_groups_commands() -> None:
    from tests.domain.harness import simulate

    # Given a queue and a node, and a job placed at 10
    # When a line before the simulation's time is followed by a later job
    output = simulate(
        {"type": "QueueConfigured", "queue": "a", "ts": 0},
        {"type": "NodeHeartbeat", "node": "n1", "capacity": {"gpu": 2}, "ts": 0},
        {"type": "JobSubmitted", "job": "first", "queue": "a", "ts": 10},
        {"type": "JobSubmitted", "job": "behind", "queue": "a", "ts": 7},
        {"type": "JobSubmitted", "job": "next", "queue": "a", "ts": 20},
    )

    # Then the refusal is printed once, between the two groups' commands
    assert [(o["type"], o.get("job"), o["ts"]) for o in output] == [
        ("Dispatch", "first", 10),
        ("Rejected", None, 10),
        ("Dispatch", "next", 20),
    ]
