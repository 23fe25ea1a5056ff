"""Bad input never stops the scheduler: each refusal lands on quotaflow.rejected with its reason (real Kafka)."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

import streams.transaction
from domain.decider import apply
from domain.events import Event
from domain.state import State
from tests.streams.test_sequencer import (
    commands_of,
    job,
    journal_of,
    make_topics,
    produce,
    read_raw,
    running_scheduler,
    seed_cluster,
    wait_for,
)

pytestmark = pytest.mark.kafka


async def _rejections(bootstrap: str, topic: str, count: int) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]] | None:
        records = await read_raw(bootstrap, topic)
        return [orjson.loads(r.value) for r in records] if len(records) >= count else None

    return await wait_for(probe, f"{count} rejections")


async def _dispatched(bootstrap: str, topics: Any, job_id: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        for _, command in await commands_of(bootstrap, topics):
            if command["type"] == "Dispatch" and command["job"] == job_id:
                return command
        return None

    return await wait_for(probe, f"a Dispatch of {job_id}")


async def bad_then_good(
    bootstrap: str, topics: Any, cluster: str, bad: list[tuple[str, bytes, tuple[str, ...]]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Sends every bad input, then job good-1; returns good-1's Dispatch and the rejections.

    good-1 is dispatched on node-a only if no bad input stalled what came behind it.
    """
    async with running_scheduler(bootstrap, topics, cluster):
        await seed_cluster(bootstrap, topics, cluster)
        for topic, raw, _ in bad:
            await produce(bootstrap, topic, [raw])
        await produce(bootstrap, topics.jobs, [job("good-1")], key="good-1")
        dispatch = await _dispatched(bootstrap, topics, "good-1")
        rejected = await _rejections(bootstrap, topics.rejected, len(bad))
    assert dispatch["node"] == "node-a"
    assert len(rejected) == len(bad)
    return dispatch, rejected


async def test_each_bad_input_is_rejected_with_a_reason_and_good_input_still_flows(
    kafka_bootstrap: str,
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    heartbeat_on_jobs = {"type": "NodeHeartbeat", "node": "node-b", "capacity": {"gpu": 1}}
    # (topic, raw input, words the reason must contain)
    bad: list[tuple[str, bytes, tuple[str, ...]]] = [
        (topics.admin, b'{"type": "QueueConfigured", "queue": ', ("not valid JSON",)),
        (topics.jobs, orjson.dumps(job("j-unknown-field", gpus=2)), ("gpus", "unknown field")),
        (topics.jobs, orjson.dumps(job("j-priority", priority=12)), ("priority",)),
        (topics.jobs, orjson.dumps(job("j-negative", gpu=-1)), ("resources.gpu",)),
        (topics.jobs, orjson.dumps({**job("j-queue"), "queue": "nope"}), ("queue 'nope'",)),
        (
            topics.nodes,
            orjson.dumps({"type": "JobStarted", "job": "ghost", "node": "node-a", "attempt": 1}),
            ("job 'ghost'",),
        ),
        (topics.jobs, orjson.dumps(heartbeat_on_jobs), ("NodeHeartbeat", "not accepted")),
        (topics.jobs, b"[1, 2, 3]", ("JSON object",)),
        (topics.jobs, orjson.dumps({**job("j-ts"), "ts": 5}), ("ts",)),
    ]
    _, rejected = await bad_then_good(kafka_bootstrap, topics, cluster, bad)
    by_input = {r["input"]: r for r in rejected}
    for topic, raw, words in bad:
        entry = by_input[raw.decode()]
        assert entry["type"] == "Rejected"
        assert entry["topic"] == topic and entry["partition"] == 0
        assert isinstance(entry["offset"], int) and isinstance(entry["ts"], int)
        for word in words:
            assert word in entry["reason"], (raw, entry["reason"])

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    submitted = [r.event.job for r in journal if r.event.type == "JobSubmitted"]
    assert submitted == ["good-1"]
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))


async def test_internal_error_rejects_that_input_and_the_scheduler_goes_on(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    real_apply = apply

    def flaky_apply(state: State, event: Event, seq: int, ts: int) -> None:
        if event.type == "JobSubmitted" and event.job == "boom":
            state.seq = -999  # a half-applied event: the scheduler must rebuild, not carry it
            raise RuntimeError("core bug")
        real_apply(state, event, seq, ts)

    monkeypatch.setattr(streams.transaction, "apply", flaky_apply)
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await seed_cluster(kafka_bootstrap, topics, cluster)
        # One batch when the scheduler is fast enough: inputs around the bad one must survive.
        await produce(kafka_bootstrap, topics.jobs, [job("before"), job("boom"), job("after")])
        await _dispatched(kafka_bootstrap, topics, "after")
        rejected = await _rejections(kafka_bootstrap, topics.rejected, 1)

    assert len(rejected) == 1
    assert rejected[0]["reason"].startswith("internal error: ")
    assert "core bug" in rejected[0]["reason"]
    assert orjson.loads(rejected[0]["input"])["job"] == "boom"
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    submitted = [r.event.job for r in journal if r.event.type == "JobSubmitted"]
    assert submitted == ["before", "after"]
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
