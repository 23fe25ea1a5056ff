"""A node agent whose offset commit Kafka never answers, against a real broker and a real
scheduler: it gives the commit up after its bound and goes on acting on commands, instead of
heartbeating while it ignores them (streams/agent_kafka.py, `commit_within`). And one whose
start-up request is never answered stops with an error naming the step (`within_start`)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

import streams.agent_kafka
from streams.agent import AgentConfig, AgentError, run_agent
from tests.streams.test_sequencer import (
    QUEUE,
    job,
    journal_of,
    make_topics,
    produce,
    running_scheduler,
    wait_for,
)


async def test_an_agent_whose_commit_never_finishes_goes_on_acting_on_commands(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    await produce(kafka_bootstrap, topics.admin, [QUEUE], key="research")
    monkeypatch.setattr(streams.agent_kafka, "COMMIT_BOUND_S", 2.0)
    real_commit = AIOKafkaConsumer.commit
    armed = [False]
    stalled: list[int] = []

    async def stalls_once(self: AIOKafkaConsumer, offsets: Any = None) -> None:
        # The first commit after the agent registered never returns, as while aiokafka
        # retries it for a coordinator that keeps answering with retriable errors.
        if armed[0] and not stalled:
            stalled.append(1)
            await asyncio.Event().wait()
        await real_commit(self, offsets)

    monkeypatch.setattr(AIOKafkaConsumer, "commit", stalls_once)
    config = AgentConfig(
        bootstrap=kafka_bootstrap,
        node="n1",
        heartbeat_s=1,
        topic_prefix=topics.prefix,
        state_dir=tmp_path,
    )
    stop = asyncio.Event()
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        agent = asyncio.create_task(run_agent(config, stop))
        try:

            async def journaled(kind: str, jobs: set[str]) -> bool:
                records = await journal_of(kafka_bootstrap, topics, cluster)
                seen = {getattr(r.event, "job", None) for r in records if r.event.type == kind}
                return jobs <= seen

            async def registered() -> bool:
                records = await journal_of(kafka_bootstrap, topics, cluster)
                return any(r.event.type == "NodeHeartbeat" for r in records)

            await wait_for(registered, "the agent registered")
            armed[0] = True
            jobs = [job("job-1", duration_s=0.2), job("job-2", duration_s=0.2)]
            await produce(kafka_bootstrap, topics.jobs, jobs)

            async def both_finished() -> bool:
                return await journaled("JobFinished", {"job-1", "job-2"})

            await wait_for(both_finished, "both jobs run and finished past the stalled commit")
            assert stalled, "the stall was never injected"
        finally:
            stop.set()
            await asyncio.wait_for(agent, 60)


async def test_an_agent_whose_start_kafka_never_answers_stops_saying_which_step(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = await make_topics(kafka_bootstrap)
    monkeypatch.setattr(streams.agent_kafka, "START_BOUND_S", 2.0)

    async def never_answers(self: AIOKafkaConsumer, partition: Any) -> None:
        # The committed offset of the node's commands never comes, as while aiokafka retries
        # its fetch for a coordinator that keeps answering with retriable errors.
        await asyncio.Event().wait()

    monkeypatch.setattr(AIOKafkaConsumer, "committed", never_answers)
    config = AgentConfig(
        bootstrap=kafka_bootstrap, node="n1", heartbeat_s=1, topic_prefix=topics.prefix,
        state_dir=tmp_path,
    )  # fmt: skip
    # The agent gives its start up after the bound, with a reason that names the step
    with pytest.raises(AgentError, match="did not answer within 2s while reading the committed"):
        await asyncio.wait_for(run_agent(config, asyncio.Event()), 30)
