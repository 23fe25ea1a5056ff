"""Accounting: resource-hours per job, queue and user from the journal, and the job list's filters."""

from __future__ import annotations

from projections.accounting import job_rows, usage_report
from projections.view import build
from tests.domain.harness import job, node, queue
from tests.projections.journal import Journal

HOUR = 3_600_000
N1 = node("n1", gpu=8, cpu=64000, memory=512000)


def workload() -> Journal:
    """Given two queues on one 8-GPU node; alice runs 2x2 GPUs for 1 h, bob 3 GPUs for 2 h,
    and alice's `wait` never finds a node (its selector matches none)."""
    j = Journal()
    j.at(1_000, queue("a", 4), queue("b", 4), N1)
    j.at(
        2_000,
        job("al", "a", gpu=2, tasks=2, user="alice", resources={"gpu": 2, "cpu": 1000}),
        job("bo", "b", gpu=3, user="bob", resources={"gpu": 3, "memory": 2048}),
        job("wait", "a", gpu=1, user="alice", node_selector={"zone": "nowhere"}),
    )
    j.obey(3_000)  # dispatched at 2_000: allocation counts from the dispatch
    j.at(2_000 + HOUR - 1, N1)  # the node's agent is alive throughout
    j.finish_job(2_000 + HOUR, "al")
    j.at(2_000 + 2 * HOUR - 1, N1)
    j.finish_job(2_000 + 2 * HOUR, "bo", outcome="failed")
    return j


def test_gpu_hours_per_queue_and_user_match_the_hand_computation() -> None:
    view = workload().view
    until = view.state.ts
    by_queue = usage_report(view.ledger, by="queue", since=None, until=until)
    # a: 2 tasks x 2 GPUs x 1 h = 4 GPU-h and 2 x 1 core x 1 h = 2 CPU-h; b: 3 GPUs x 2 h = 6.
    rows = {row["queue"]: row for row in by_queue}
    assert rows["b"]["gpu_hours"] == 6.0
    assert rows["b"]["memory_gb_hours"] == 4.0  # 2 GB x 2 h
    by_user = {
        row["user"]: row for row in usage_report(view.ledger, by="user", since=None, until=until)
    }
    assert by_user["bob"]["gpu_hours"] == 6.0
    assert by_user["bob"]["jobs"] == 1
    al = next(r for r in job_rows(view.ledger, now=until, include_ended=True) if r["job"] == "al")
    assert al["gpu_hours"] == 4.0
    assert rows["a"]["cpu_hours"] == 2.0
    assert rows["a"]["gpu_hours"] == 4.0
    assert by_user["alice"]["jobs"] == 1  # `wait` held nothing


def test_a_window_counts_only_the_hours_inside_it() -> None:
    view = workload().view
    report = usage_report(view.ledger, by="user", since=2_000 + HOUR, until=2_000 + 2 * HOUR)
    assert {row["user"]: row["gpu_hours"] for row in report}["bob"] == 3.0
    assert "alice" not in {row["user"] for row in report}  # her job ended as the window opened


def test_the_job_list_filters_by_user_state_and_queue_and_keeps_ended_jobs_on_request() -> None:
    view = workload().view
    now = view.state.ts
    live = job_rows(view.ledger, now=now)
    assert [r["job"] for r in live] == ["wait"]
    everything = job_rows(view.ledger, now=now, include_ended=True)
    assert [(r["job"], r["state"], r["user"]) for r in everything] == [
        ("al", "finished", "alice"),
        ("bo", "failed", "bob"),
        ("wait", "pending", "alice"),
    ]
    failed = job_rows(view.ledger, now=now, states=frozenset({"failed"}), include_ended=True)
    assert [r["job"] for r in failed] == ["bo"]
    alice_a = job_rows(
        view.ledger,
        now=now,
        users=frozenset({"alice"}),
        queues=frozenset({"a"}),
        ended_since=2_000 + HOUR,
    )
    assert [r["job"] for r in alice_a] == ["al", "wait"]
    late = job_rows(view.ledger, now=now, ended_since=2_000 + HOUR + 1)
    assert [r["job"] for r in late] == ["bo", "wait"]


def test_the_ledger_is_rebuilt_identically_from_the_journal() -> None:
    j = workload()
    again = build(j.records)
    assert usage_report(
        again.ledger, by="queue", since=None, until=j.view.state.ts
    ) == usage_report(j.view.ledger, by="queue", since=None, until=j.view.state.ts)


def test_a_lost_node_ends_the_hours_of_the_jobs_on_it() -> None:
    """Given a job running on n1, when n1 falls silent, then its hours stop at the loss."""
    j = Journal()
    j.at(1_000, queue("a", 4), N1)
    j.at(2_000, job("run", "a", gpu=2, user="dora"))
    j.obey(2_001)
    j.tick(2_000 + HOUR)  # heartbeat_timeout_s (30 s) long past: n1 is lost at this tick
    lost_at = j.view.state.ts
    assert j.view.state.nodes["n1"].lost
    j.tick(2_000 + 3 * HOUR)
    [row] = usage_report(j.view.ledger, by="user", since=None, until=j.view.state.ts)
    assert row["gpu_hours"] == round(2 * (lost_at - 2_000) / HOUR, 6)
