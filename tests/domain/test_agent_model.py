"""The node agent model shared by the simulator and the live agent: commands in, reports out (pure)."""

from __future__ import annotations

from typing import Any

from domain.agent import AgentModel
from domain.commands import Dispatch, Preempt


def dispatch(
    job: str, attempt: int = 1, tasks: int = 1, node: str = "n1", **extra: Any
) -> Dispatch:
    return Dispatch(
        job=job, node=node, tasks=tasks, resources={"gpu": 1}, attempt=attempt, seq=1, ts=0,
        reason="quota", **extra,
    )  # fmt: skip


def preempt(job: str, attempt: int = 1, tasks: int = 1, node: str = "n1") -> Preempt:
    return Preempt(
        job=job, node=node, tasks=tasks, attempt=attempt, seq=1, ts=0, reason="shrink"
    )  # fmt: skip


def report(reaction: Any) -> tuple[str, str, int] | None:
    made = reaction.report
    return None if made is None else (type(made).__name__, made.job, made.attempt)


def test_a_dispatch_starts_a_run_that_finishes_after_its_duration() -> None:
    agent = AgentModel()
    reaction = agent.dispatch(dispatch("j", duration_s=1.5), now_ts=1000)
    assert reaction.kind == "start" and report(reaction) == ("JobStarted", "j", 1)
    assert agent.next_due() == 2500
    assert agent.finish_due(2499) == []
    (finished,) = agent.finish_due(2500)
    assert (finished.job, finished.attempt, finished.outcome) == ("j", 1, "succeeded")
    assert agent.next_due() is None


def test_an_elastic_job_expands_then_shrinks_and_finishes_with_its_first_start() -> None:
    agent = AgentModel()
    agent.dispatch(dispatch("e", tasks=2, duration_s=10), now_ts=0)
    expand = agent.dispatch(dispatch("e", tasks=2, duration_s=10), now_ts=5000)
    assert expand.kind == "expand" and report(expand) == ("JobStarted", "e", 1)
    shrink = agent.preempt(preempt("e", tasks=2))
    assert shrink.kind == "shrink" and report(shrink) == ("JobPreempted", "e", 1)
    assert [f.job for f in agent.finish_due(10_000)] == ["e"]  # one finish, at the first due


def test_a_preempt_stops_the_run_and_its_finish() -> None:
    agent = AgentModel()
    agent.dispatch(dispatch("j", duration_s=1), now_ts=0)
    stop = agent.preempt(preempt("j"))
    assert stop.kind == "stop" and report(stop) == ("JobPreempted", "j", 1)
    assert agent.finish_due(10_000) == [] and agent.next_due() is None


def test_late_and_orphan_preempts() -> None:
    agent = AgentModel()
    agent.dispatch(dispatch("short", duration_s=0), now_ts=0)
    agent.finish_due(0)
    late = agent.preempt(preempt("short"))
    assert late.kind == "already_finished" and late.report is None
    orphan = agent.preempt(preempt("ghost", attempt=3))
    assert orphan.kind == "not_running" and report(orphan) == ("JobPreempted", "ghost", 3)


def test_a_newer_attempt_displaces_the_older_one_quietly() -> None:
    agent = AgentModel()
    first = agent.dispatch(dispatch("j", attempt=1, duration_s=5), now_ts=0)
    second = agent.dispatch(dispatch("j", attempt=2, duration_s=5), now_ts=1000)
    assert second.kind == "start" and second.displaced is first.run
    assert [(f.attempt) for f in agent.finish_due(10_000)] == [2]


def test_runs_due_together_finish_in_start_order_across_nodes() -> None:
    agent = AgentModel()
    agent.dispatch(dispatch("b", node="n2", duration_s=2), now_ts=0)
    agent.dispatch(dispatch("a", node="n1", duration_s=1), now_ts=1000)
    assert [(f.job, f.node) for f in agent.finish_due(2000)] == [("b", "n2"), ("a", "n1")]


def test_a_restarted_agent_ignores_dispatches_addressed_to_its_earlier_start() -> None:
    agent = AgentModel(incarnation=2)
    stale = agent.dispatch(dispatch("old", incarnation=1), now_ts=0)
    assert stale.kind == "other_incarnation" and stale.report is None and agent.runs == {}
    fresh = agent.dispatch(dispatch("new", incarnation=2), now_ts=0)
    assert fresh.kind == "start"
    legacy = agent.dispatch(dispatch("any"), now_ts=0)  # a scheduler that sends none
    assert legacy.kind == "start"


def test_a_run_that_was_stopped_cannot_also_finish() -> None:
    agent = AgentModel()
    run = agent.dispatch(dispatch("j"), now_ts=0).run
    assert run is not None
    agent.preempt(preempt("j"))
    assert agent.finish(run, "succeeded") is None
