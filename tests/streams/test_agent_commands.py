"""How a node agent answers commands: expand, shrink, late preempts, newer attempts.

The agent's reports leave through `Agent._send`; these tests record them there (the only
seam replaced), so the command handling itself runs as in production, without a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from domain.events import JobFinished, JobPreempted, JobStarted
from domain.wire_types import Strict
from streams.agent import Agent, AgentConfig


class RecordingAgent(Agent):
    def __init__(self) -> None:
        super().__init__(AgentConfig(bootstrap="unused:0", node="n1"), say=self.lines_append)
        self.lines: list[str] = []
        self.sent: list[Strict] = []

    def lines_append(self, line: str) -> None:
        self.lines.append(line)

    async def _send(self, event: Strict) -> None:
        self.sent.append(event)

    async def command(self, **fields: Any) -> None:
        await self._handle(orjson.dumps({"node": "n1", "seq": 1, "ts": 0, **fields}))
        await asyncio.sleep(0.01)  # let background reports run

    def reports(self) -> list[tuple[str, str, int]]:
        return [(type(e).__name__, e.job, e.attempt) for e in self.sent]  # type: ignore[attr-defined]


async def until(condition: Callable[[], bool]) -> None:
    """Waits for the agent's background work (a generous ceiling, not a speed check)."""
    for _ in range(600):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met within 30 s")


def dispatch(job: str, attempt: int, tasks: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "Dispatch", "job": job, "attempt": attempt, "tasks": tasks, "reason": "quota",
        "resources": {"gpu": 1}, **extra,
    }  # fmt: skip


def preempt(job: str, attempt: int, tasks: int) -> dict[str, Any]:
    return {"type": "Preempt", "job": job, "attempt": attempt, "tasks": tasks, "reason": "shrink"}


async def test_an_elastic_job_expands_then_shrinks_task_by_task() -> None:
    agent = RecordingAgent()
    await agent.command(**dispatch("e", 1, 2))
    await agent.command(**dispatch("e", 1, 2))  # expand: same attempt, more tasks here
    assert agent.runs["e"].tasks == 4
    await agent.command(**preempt("e", 1, 2))  # shrink: half stop, the rest runs on
    assert agent.runs["e"].tasks == 2
    await agent.command(**preempt("e", 1, 2))
    assert "e" not in agent.runs
    assert agent.reports() == [
        ("JobStarted", "e", 1),
        ("JobStarted", "e", 1),
        ("JobPreempted", "e", 1),
        ("JobPreempted", "e", 1),
    ]


async def test_a_preempt_for_a_job_that_already_finished_is_ignored() -> None:
    agent = RecordingAgent()
    await agent.command(**dispatch("short", 1, 1, duration_s=0))
    await until(lambda: len(agent.sent) == 2)
    await agent.command(**preempt("short", 1, 1))
    assert agent.reports() == [("JobStarted", "short", 1), ("JobFinished", "short", 1)]
    assert isinstance(agent.sent[1], JobFinished) and agent.sent[1].outcome == "succeeded"
    assert any("already finished, ignored" in line for line in agent.lines)


async def test_a_preempt_for_an_attempt_not_running_here_is_acknowledged() -> None:
    agent = RecordingAgent()  # e.g. after an agent restart: nothing of attempt 3 runs here
    await agent.command(**preempt("ghost", 3, 1))
    assert agent.reports() == [("JobPreempted", "ghost", 3)]


async def test_a_newer_attempt_replaces_an_older_one_quietly() -> None:
    agent = RecordingAgent()
    await agent.command(**dispatch("j", 1, 1))
    await agent.command(**dispatch("j", 2, 1))  # the scheduler requeued it meanwhile
    assert agent.runs["j"].attempt == 2
    assert all(not isinstance(e, JobPreempted) for e in agent.sent)  # attempt 1 says nothing
    assert [e.attempt for e in agent.sent if isinstance(e, JobStarted)] == [1, 2]
    await agent._stop_everything()


async def test_commands_for_other_nodes_are_not_acted_on() -> None:
    agent = RecordingAgent()
    await agent._handle(orjson.dumps({"node": "n2", **dispatch("x", 1, 1)}))
    assert agent.sent == [] and agent.runs == {}


async def test_a_dispatch_carries_the_run_time_and_the_agent_reads_nothing_else() -> None:
    agent = RecordingAgent()
    await agent.command(**dispatch("timed", 1, 1, duration_s=0.02, labels={"k": "v"}))
    assert "runs for 0.02s" in agent.lines[-1]
    await until(lambda: len(agent.sent) == 2)
    assert agent.reports() == [("JobStarted", "timed", 1), ("JobFinished", "timed", 1)]


async def test_a_dispatch_for_an_earlier_incarnation_of_this_agent_is_ignored() -> None:
    agent = RecordingAgent()
    agent.model.incarnation = 3
    await agent.command(**dispatch("old", 1, 1, incarnation=2))
    assert agent.sent == [] and agent.runs == {}
    assert "ignored: addressed to incarnation 2" in agent.lines[-1]
    await agent.command(**dispatch("new", 1, 1, incarnation=3))
    assert agent.reports() == [("JobStarted", "new", 1)]
    await agent._stop_everything()
