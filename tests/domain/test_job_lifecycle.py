"""Time limits, retries and dependencies in the pure core, as given / when / then (pure)."""

from __future__ import annotations

from domain.commands import Preempt
from domain.snapshot import decode_state, encode_state
from tests.domain.harness import Cluster, event, job, node, queue


def _running(cluster: Cluster, ts: int, *jobs: object) -> None:
    cluster.when(ts, *jobs)  # type: ignore[arg-type]
    cluster.agents_obey(ts)


def test_a_job_over_its_time_limit_is_preempted_and_ends_failed() -> None:
    cluster = Cluster()
    cluster.given(0, event("ClusterConfigured", heartbeat_timeout_s=3600))
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 1000, job("slow", "a", time_limit_s=60, max_retries=3))
    cluster.when(60_999, event("Tick"))
    assert cluster.preempted() == []
    cluster.when(61_000, event("Tick"))
    assert [(c.job, c.reason) for c in cluster.last if isinstance(c, Preempt)] == [
        ("slow", "time_limit")
    ]
    assert cluster.job_view("slow").timed_out
    cluster.agents_obey(62_000)
    view = cluster.job_view("slow")
    assert view.status == "failed"  # not requeued, and not retried either
    assert cluster.dispatched() == []


def test_the_time_limit_counts_from_the_start_of_the_attempt() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    cluster.when(1000, job("late-start", "a", time_limit_s=10))
    cluster.agents_obey(5000)  # started at 5 s: the limit is up at 15 s, not 11 s
    cluster.when(11_000, event("Tick"))
    assert cluster.preempted() == []
    cluster.when(15_000, event("Tick"))
    assert cluster.preempted() == ["late-start"]


def test_a_job_that_finishes_in_time_is_not_stopped() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("quick", "a", time_limit_s=10))
    cluster.finish(5000, "quick")
    cluster.when(10_000, event("Tick"))
    assert cluster.last == []
    assert cluster.job_view("quick").status == "finished"


def test_a_failed_job_is_retried_max_retries_times_keeping_its_place() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=1), node("n1", gpu=1))
    _running(cluster, 0, job("flaky", "a", max_retries=2))
    cluster.given(1, job("next", "a"))
    for attempt in (2, 3):
        cluster.finish(10 * attempt, "flaky", outcome="failed")
        assert [(c.job, c.attempt) for c in cluster.last] == [("flaky", attempt)]
        assert cluster.job_view("flaky").retries == attempt - 1
        cluster.agents_obey()
    cluster.finish(100, "flaky", outcome="failed")
    assert cluster.job_view("flaky").status == "failed"
    assert cluster.dispatched() == ["next"]


def test_without_max_retries_a_failed_job_ends_failed() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=1), node("n1", gpu=1))
    _running(cluster, 0, job("once", "a"))
    cluster.finish(10, "once", outcome="failed")
    assert cluster.job_view("once").status == "failed"


def test_a_dependent_job_starts_only_after_its_dependencies_succeed() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("prep", "a"), job("fetch", "a"))
    cluster.when(1, job("train", "a", after_ok=["prep", "fetch"]))
    assert cluster.dispatched() == []
    assert cluster.job_view("train").waiting_for == ("fetch", "prep")
    cluster.finish(10, "prep")
    assert cluster.dispatched() == []
    assert cluster.job_view("train").waiting_for == ("fetch",)
    cluster.finish(20, "fetch")
    assert cluster.dispatched() == ["train"]


def test_a_waiting_job_does_not_stop_a_fifo_queue() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=2))
    _running(cluster, 0, job("prep", "a"))
    cluster.when(1, job("train", "a", after_ok=["prep"]), job("other", "a"))
    assert cluster.dispatched() == ["other"]


def test_a_failed_or_cancelled_dependency_fails_its_dependents_at_once() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("prep", "a"))
    cluster.given(1, job("train", "a", after_ok=["prep"]), job("eval", "a", after_ok=["train"]))
    cluster.given(2, job("side", "a", gpu=16))  # pending: cancelled below
    cluster.given(3, job("report", "a", after_ok=["side"]))
    cluster.finish(10, "prep", outcome="failed")
    assert cluster.job_view("train").status == "failed"
    assert cluster.job_view("train").dependency_failed == "prep"
    assert cluster.job_view("eval").dependency_failed == "train"  # and so on down the chain
    cluster.when(11, event("JobCancelled", job="side"))
    assert cluster.job_view("report").status == "failed"
    assert cluster.job_view("report").dependency_failed == "side"


def test_a_retried_dependency_keeps_its_dependents_waiting() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("prep", "a", max_retries=1))
    cluster.given(1, job("train", "a", after_ok=["prep"]))
    cluster.finish(10, "prep", outcome="failed")
    assert cluster.job_view("train").waiting_for == ("prep",)
    cluster.agents_obey()
    cluster.finish(20, "prep")
    assert cluster.dispatched() == ["train"]


def test_unknown_or_failed_dependencies_are_refused_at_acceptance() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("prep", "a"))
    cluster.finish(10, "prep", outcome="failed")
    cluster.when(11, job("ghost-child", "a", after_ok=["ghost"]))
    cluster.when(12, job("late", "a", after_ok=["prep"]))
    reasons = [reason for _, reason in cluster.rejections]
    assert "after_ok: job 'ghost' does not exist" in reasons[0]
    assert "no cycle can form" in reasons[0]
    assert "already ended failed" in reasons[1]
    assert "ghost-child" not in cluster.job_ids() and "late" not in cluster.job_ids()


def test_a_cancelled_waiting_job_leaves_nothing_behind() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("prep", "a"))
    cluster.given(1, job("train", "a", after_ok=["prep"]))
    cluster.when(2, event("JobCancelled", job="train"))
    assert cluster.job_view("train").status == "cancelled"
    cluster.finish(10, "prep")
    assert cluster.dispatched() == []
    assert cluster.state.waiting == {} and cluster.state.dependents == {}


def test_the_dispatch_carries_the_jobs_grace_period_else_the_clusters() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    cluster.when(1, job("plain", "a"))
    assert cluster.last[0].to_wire().get("preempt_grace_s") is None
    cluster.given(2, event("ClusterConfigured", preempt_grace_s=30))
    cluster.when(3, job("own", "a", preempt_grace_s=90), job("default", "a"))
    assert [(c.job, c.to_wire()["preempt_grace_s"]) for c in cluster.last] == [
        ("own", 90),
        ("default", 30),
    ]


def test_a_snapshot_keeps_waiting_jobs_retries_and_time_limits() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n1", gpu=8))
    _running(cluster, 0, job("prep", "a", max_retries=2, time_limit_s=100))
    cluster.finish(10, "prep", outcome="failed")
    cluster.agents_obey()
    cluster.given(11, job("train", "a", after_ok=["prep"]), job("doomed", "a", gpu=16))
    cluster.given(12, job("after-doomed", "a", after_ok=["doomed"]))
    cluster.given(13, event("JobCancelled", job="doomed"))
    body = encode_state(cluster.state)
    restored = decode_state(body)
    assert encode_state(restored) == body
    assert restored.waiting == {"train": {"prep"}}
    assert restored.jobs["prep"].retries == 1
    assert restored.dependency_failed == {"after-doomed": "doomed"}
    assert any(kind == "time_limit" for _, kind, _ in restored.timers)
