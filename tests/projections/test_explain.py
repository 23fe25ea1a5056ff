"""Explain: each pending reason and each preemption reason, from a journal, at any past time."""

from __future__ import annotations

from typing import Any

import pytest

from projections.explain import PREEMPTION_RULES, explain_at, explain_job, pending_jobs, render
from projections.read_models import queue_summary
from tests.domain.harness import event, job, node
from tests.projections.journal import Journal

SELF_LEVEL = {"high_priority": [6, 9], "low_priority": 4, "modules": ["DLC", "DSW"]}
CHILD_LEVEL = {"priority": [1, 3], "modules": ["DLC", "DSW"]}


def queue(
    name: str, quota: float, limit: float = -1, weight: float | None = None, **fields: Any
) -> Any:
    spec: dict[str, Any] = {"quota": quota, "limit": limit}
    if weight is not None:
        spec["over_quota_weight"] = weight
    return event("QueueConfigured", queue=name, resources={"gpu": spec}, **fields)


def pending(journal: Journal, job_id: str) -> dict[str, Any]:
    state = journal.view.state
    rows = pending_jobs(state, state.jobs[job_id].queue, state.ts)
    return next(r for r in rows if r["job"] == job_id)


# -- pending reasons ----------------------------------------------------------------------------


def test_capacity_no_node_has_room() -> None:
    j = Journal()
    j.at(1, queue("a", 8), node("n1", gpu=8))
    j.at(2, job("big", "a", gpu=6), job("next", "a", gpu=4))
    row = pending(j, "next")
    assert (row["kind"], row["position"]) == ("capacity", 1)
    assert "no room on nodes" in row["reason"]
    assert "position 1 of 1" in explain_job(j.view, "next")["summary"]


def test_quota_interactive_jobs_run_only_within_deserved_quota() -> None:
    j = Journal()
    j.at(1, queue("a", 1), queue("b", 0), node("n1", gpu=4))
    j.at(2, job("i0", "a", interactive=True))
    j.obey(3)
    j.at(4, job("i1", "a", interactive=True))
    row = pending(j, "i1")
    assert row["kind"] == "quota"
    assert "deserved quota" in row["reason"]


def test_limit_the_queue_would_exceed_its_hard_limit() -> None:
    j = Journal()
    j.at(1, queue("a", 1, limit=2), node("n1", gpu=8))
    j.at(2, job("wide", "a", gpu=3))
    row = pending(j, "wide")
    assert row["kind"] == "limit"
    assert "would exceed its limit" in row["reason"]


def test_blocked_behind_the_fifo_head() -> None:
    j = Journal()
    j.at(1, queue("a", 8), node("n1", gpu=8))
    j.at(2, job("big", "a", gpu=6), job("head", "a", gpu=4), job("small", "a", gpu=1))
    head, small = pending(j, "head"), pending(j, "small")
    assert (head["position"], head["kind"]) == (1, "capacity")
    assert (small["position"], small["kind"]) == (2, "blocked_behind_head")
    assert "head" in small["reason"] and "fifo" in small["reason"]
    assert "small" not in j.view.state.nodes["n1"].jobs  # fifo: 2 free GPUs stay idle


def test_balance_wait_behind_a_head_until_its_timeout() -> None:
    j = Journal()
    balance = {"kind": "balance", "balance_timeout_s": 60}
    j.at(1_000, queue("a", 8, policy=balance), node("n1", gpu=8))
    j.at(2_000, job("big", "a", gpu=6), job("head", "a", gpu=4), job("small", "a", gpu=1))
    j.obey(3_000)
    j.at(32_000, node("n1", gpu=8))  # the agent's heartbeat keeps the node alive
    small = pending(j, "small")
    assert small["kind"] == "balance_wait"
    assert "skips head in 30 s" in small["reason"]
    j.at(
        62_000, node("n1", gpu=8)
    )  # the head has been blocked for balance_timeout_s: it is skipped
    assert j.view.state.jobs["small"].placements == {"n1": 1}
    # ... and explain can still tell what it was waiting for at 32 s.
    past = explain_at(j.records, "small", at=32_000)
    assert past["kind"] == "balance_wait"
    assert explain_at(j.records, "small")["status"] == "running"


def test_explain_at_before_submission_and_after_the_end() -> None:
    j = Journal()
    j.at(1, queue("a", 8), node("n1", gpu=8))
    j.at(2, job("x", "a", gpu=1, duration_s=1))
    j.obey(3)
    j.finish_job(10, "x")
    assert explain_at(j.records, "x", at=1)["status"] == "unknown"
    assert explain_at(j.records, "x", at=5)["status"] == "running"
    done = explain_at(j.records, "x")
    assert done["status"] == "finished" and "finished at ts 10" in done["summary"]
    assert "as of ts 10" in render(done)


# -- preemption reasons -------------------------------------------------------------------------


def settle(j: Journal, ts: int) -> None:
    """Agents answer every command until the core has nothing more to say."""
    while j.last:
        ts += 1
        j.obey(ts)


def reclaim(j: Journal) -> None:
    j.at(1, queue("a", 2), queue("b", 2), node("n1", gpu=4))
    j.at(2, *[job(f"b{i}", "b") for i in range(4)])
    settle(j, 2)
    j.at(100, job("a0", "a"))


def priority(j: Journal) -> None:
    j.at(1, queue("a", 2, preemption={"within_queue": True}), node("n1", gpu=2))
    j.at(2, job("low", "a", priority=3), job("mid", "a", priority=6))
    settle(j, 2)
    j.at(100, job("high", "a", priority=7))


def interactive(j: Journal) -> None:
    j.at(1, queue("a", 2), node("n1", gpu=2))
    j.at(2, job("t0", "a"), job("t1", "a"))
    settle(j, 2)
    j.at(100, job("notebook", "a", interactive=True))


def self_level(j: Journal) -> None:
    j.at(1, queue("team-a", 0, weight=0, preemption={"self_level": SELF_LEVEL}), queue("team-b", 2))
    j.at(
        2, node("n1", gpu=2), job("b-low", "team-b", priority=4), job("b-mid", "team-b", priority=5)
    )
    settle(j, 2)
    j.at(100, job("urgent", "team-a", priority=7))


def child_level(j: Journal) -> None:
    j.at(1, queue("org", 2, preemption={"child_level": CHILD_LEVEL}), node("n1", gpu=2))
    j.at(2, queue("org-x", 1, parent="org"), queue("org-y", 1, parent="org"))
    j.at(3, job("x-low", "org-x", priority=2), job("y-low", "org-y", priority=4))
    settle(j, 3)
    j.at(100, job("parent-job", "org", priority=5))


def shrink(j: Journal) -> None:
    rule = {"high_priority": [6, 9], "low_priority": [1, 5], "modules": ["DLC"]}
    j.at(1, queue("team-a", 0, weight=0, preemption={"self_level": rule}), queue("team-b", 4))
    j.at(2, node("n1", gpu=4), job("elastic", "team-b", priority=5, tasks=4, min_tasks=1))
    settle(j, 2)
    j.at(100, job("urgent", "team-a", priority=9, gpu=2))


def consolidation(j: Journal) -> None:
    j.at(1, queue("a", 8), node("n1", gpu=4), node("n2", gpu=4))
    j.at(2, *[job(name, "a", gpu=2, duration_s=1000) for name in ("p", "q", "r", "s")])
    settle(j, 2)
    placed = {n: sorted(j.view.state.nodes[n].jobs) for n in ("n1", "n2")}
    # Leave 2 free GPUs on each node: a 4-GPU job fits in total but on no node.
    j.finish_job(50, placed["n1"][1])
    j.finish_job(51, placed["n2"][1])
    j.at(100, job("wide", "a", gpu=4))


SCENARIOS = {
    "reclaim": (reclaim, "a0"),
    "priority": (priority, "high"),
    "interactive": (interactive, "notebook"),
    "self_level": (self_level, "urgent"),
    "child_level": (child_level, "parent-job"),
    "shrink": (shrink, "urgent"),
    "consolidation": (consolidation, "wide"),
}


@pytest.mark.parametrize("reason", sorted(SCENARIOS))
def test_preemption_explained_with_its_rule_and_preemptor(reason: str) -> None:
    build, preemptor = SCENARIOS[reason]
    j = Journal()
    build(j)
    preempts = [c for c in j.last if c.type == "Preempt"]
    assert preempts, f"the core issued no Preempt for the {reason} scenario"
    assert {c.reason for c in preempts} == {reason}
    victim = preempts[0].job
    explained = explain_job(j.view, victim)
    text = " ".join(explained.get("preemptions", [])) + " " + explained["summary"]
    assert f"reason {reason!r}" in text
    assert f"by {preemptor}" in text
    assert PREEMPTION_RULES[reason] in text
    # The preemptor's own explanation names whom it displaced.
    made_room = explain_job(j.view, preemptor).get("made_room_by", [])
    assert any(victim in line and reason in line for line in made_room)
    # Once the victim has stopped, explain at that later time still says why it was stopped.
    settle(j, 100)
    later = explain_at(j.records, victim)
    assert any(f"by {preemptor}" in line for line in later.get("preemptions", []))


def test_reclaim_explanation_carries_the_queues_numbers_of_that_cycle() -> None:
    j = Journal()
    reclaim(j)
    victim = next(c.job for c in j.last if c.type == "Preempt")
    [entry] = [e for e in j.view.timelines[victim] if e["event"] == "preempted"]
    gpu_b = entry["context"]["victim_queue"]["resources"]["gpu"]
    gpu_a = entry["context"]["preemptor_queue"]["resources"]["gpu"]
    # a asks for 1 GPU of its deserved 2, so b's fair share is the other 3, and b holds 4.
    assert (gpu_a["deserved"], gpu_a["fair_share"], gpu_a["allocated"]) == (2, 1, 0)
    assert (gpu_b["deserved"], gpu_b["fair_share"], gpu_b["allocated"]) == (2, 3, 4)


def test_cancel_and_node_loss_are_explained_without_a_preemptor() -> None:
    j = Journal()
    j.at(1, event("ClusterConfigured", heartbeat_timeout_s=10), queue("a", 8))
    j.at(2, node("n1", gpu=1), node("n2", gpu=1), node("n3", gpu=1))
    j.at(3, job("gang", "a", tasks=2), job("solo", "a"))
    placed = {c.job: c.node for c in j.last if c.type == "Dispatch" and c.job == "solo"}
    gang_nodes = sorted(c.node for c in j.last if c.type == "Dispatch" and c.job == "gang")
    settle(j, 3)
    # One of the gang's nodes goes silent; the others keep beating.
    j.at(6_000, *(node(n, gpu=1) for n in (gang_nodes[0], placed["solo"])))
    j.tick(12_500)
    assert [(c.job, c.reason) for c in j.last] == [("gang", "node_lost")]
    j.at(12_600, event("JobCancelled", job="solo"))
    assert [(c.job, c.reason) for c in j.last] == [("solo", "cancelled")]
    for victim, reason in (("gang", "node_lost"), ("solo", "cancelled")):
        explained = explain_job(j.view, victim)
        text = " ".join(explained.get("preemptions", [])) + " " + explained["summary"]
        assert f"reason {reason!r}" in text
        assert PREEMPTION_RULES[reason] in text


def test_a_cancel_is_explained_with_the_fair_shares_of_its_own_cycle() -> None:
    """The stop of a cancelled job comes from a cycle with nothing pending, in the group
    where another of the queue's jobs finished: its numbers are that cycle's (a's fair
    share without the finished job), not the last ones a view brought up to date."""
    j = Journal()
    j.at(1, queue("a", 2), queue("b", 2), node("n1", gpu=4))
    j.at(2, *[job(f"a{i}", "a") for i in range(3)])
    settle(j, 2)
    before = queue_summary(j.view, j.view.state.queues["a"])["resources"]["gpu"]
    assert (before["fair_share"], before["allocated"]) == (3, 3)
    finished = j.view.state.jobs["a1"]
    j.at(
        10,
        event("JobCancelled", job="a0"),
        event("JobFinished", job="a1", node="n1", attempt=finished.attempt, outcome="succeeded"),
    )
    assert [(c.job, c.reason) for c in j.last if c.type == "Preempt"] == [("a0", "cancelled")]
    [entry] = [e for e in j.view.timelines["a0"] if e["event"] == "preempted"]
    gpu_a = entry["context"]["victim_queue"]["resources"]["gpu"]
    assert (gpu_a["fair_share"], gpu_a["allocated"]) == (2, 2)
