"""Exit codes, attempts, retries and dependencies as jobs and explain show them (pure)."""

from __future__ import annotations

from projections.explain import explain_at, explain_job, render
from projections.read_models import jobs_view
from tests.domain.harness import event, job, node, queue
from tests.projections.journal import Journal


def _fail(j: Journal, ts: int, job_id: str, code: int, reason: str | None = None) -> None:
    attempt = j.view.state.jobs[job_id].attempt
    fields = {"exit_code": code} | ({"reason": reason} if reason else {})
    j.at(
        ts,
        event("JobFinished", job=job_id, node="n1", attempt=attempt, outcome="failed", **fields),
    )


def test_a_retried_job_shows_its_attempts_with_exit_codes() -> None:
    j = Journal()
    j.at(1, queue("a", gpu_quota=8), node("n1", gpu=8))
    j.at(2, job("flaky", "a", max_retries=1))
    j.obey(3)
    _fail(j, 4, "flaky", 3)
    row = next(r for r in jobs_view(j.view, "a") if r["job"] == "flaky")
    assert (row["attempt"], row["retries"]) == (2, 1)
    assert row["last_exit"] == {"attempt": 1, "outcome": "failed", "exit_code": 3}
    j.obey(5)
    _fail(j, 6, "flaky", 137, "SIGKILL")
    done = explain_at(j.records, "flaky")
    assert done["status"] == "failed"
    assert done["summary"].endswith("(exit 137 (SIGKILL) on n1)")
    assert done["attempts"] == [
        "attempt 1 failed on n1 at ts 4, exit code 3",
        "attempt 2 failed on n1 at ts 6, exit code 137 (SIGKILL)",
    ]
    assert "attempt: attempt 2 failed" in render(done)


def test_explain_says_what_a_job_waits_for_and_why_it_failed() -> None:
    j = Journal()
    j.at(1, queue("a", gpu_quota=8), node("n1", gpu=8))
    j.at(2, job("prep", "a"))
    j.obey(3)
    j.at(4, job("train", "a", after_ok=["prep"]))
    waiting = explain_job(j.view, "train")
    assert (waiting["kind"], waiting["waiting_for"]) == ("dependency", ["prep"])
    assert next(r for r in jobs_view(j.view) if r["job"] == "train")["waiting_for"] == ["prep"]
    _fail(j, 5, "prep", 1)
    failed = explain_job(j.view, "train")
    assert failed["status"] == "failed"
    assert "its dependency prep did not succeed" in failed["summary"]


def test_explain_names_the_time_limit() -> None:
    j = Journal()
    j.at(1, queue("a", gpu_quota=8), node("n1", gpu=8))
    j.at(2, job("slow", "a", time_limit_s=5))
    j.obey(3)
    j.tick(5003)
    j.obey(5004)
    done = explain_job(j.view, "slow")
    assert done["status"] == "failed"
    assert "stopped at its time limit (ts 5003)" in done["summary"]
