"""The scheduler against a real broker (journal numbering, stamping, commands) and the pure replay audit."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson

from domain.audit import audit, expected_commands
from domain.codec import decode_command
from domain.events import JobSubmitted, JournalRecord, NodeHeartbeat, QueueConfigured
from streams.kafka_io import Topics, ensure_topics, idempotent_producer, read_to_end
from streams.replay import read_journal, replay
from streams.sequencer import Scheduler

T = TypeVar("T")

# A deadline only stops a hung test; nothing here asserts how fast the scheduler is.
WAIT_S = 60


def unique_prefix() -> str:
    """A per-test topic prefix: each test reads and writes only its own topics."""
    return f"test-{uuid.uuid4().hex[:10]}."


async def make_topics(bootstrap: str) -> Topics:
    topics = Topics.for_prefix(unique_prefix())
    await ensure_topics(bootstrap, topics)
    return topics


async def produce(bootstrap: str, topic: str, values: list[Any], key: str | None = None) -> None:
    """Writes values in order: dicts as JSON, bytes and str as they are."""
    producer = idempotent_producer(bootstrap)
    await producer.start()
    try:
        for value in values:
            if isinstance(value, dict):
                raw = orjson.dumps(value)
            elif isinstance(value, str):
                raw = value.encode()
            else:
                raw = value
            await producer.send_and_wait(topic, raw, key=key.encode() if key else None)
    finally:
        await producer.stop()


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = WAIT_S
) -> T:
    """Polls `probe` until it returns something other than None (or False)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = await probe()
        if result is not None and result is not False:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.2)


async def journal_of(bootstrap: str, topics: Topics, cluster: str) -> list[JournalRecord]:
    return await read_journal(bootstrap, topics.prefix, cluster)


async def wait_journaled(
    bootstrap: str, topics: Topics, cluster: str, predicate: Callable[[JournalRecord], bool]
) -> list[JournalRecord]:
    async def probe() -> list[JournalRecord] | None:
        records = await journal_of(bootstrap, topics, cluster)
        return records if any(predicate(r) for r in records) else None

    return await wait_for(probe, "a journal record")


async def read_raw(bootstrap: str, topic: str) -> list[Any]:
    return (await read_to_end(bootstrap, topic))[topic]


async def commands_of(bootstrap: str, topics: Topics) -> list[tuple[bytes | None, dict[str, Any]]]:
    return [(r.key, decode_command(r.value)) for r in await read_raw(bootstrap, topics.commands)]


@contextlib.asynccontextmanager
async def running_scheduler(
    bootstrap: str, topics: Topics, cluster: str = "default"
) -> AsyncIterator[Scheduler]:
    """A scheduler running in this event loop until the block ends."""
    scheduler = Scheduler(bootstrap, cluster, topics.prefix)
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        yield scheduler
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)


QUEUE = {
    "type": "QueueConfigured",
    "queue": "research",
    "resources": {"gpu": {"quota": 4, "limit": -1}},
}
NODE = {
    "type": "NodeHeartbeat",
    "node": "node-a",
    "capacity": {"gpu": 8, "cpu": 64000, "memory": 256000},
}


def job(job_id: str, gpu: float = 1, **extra: Any) -> dict[str, Any]:
    return {
        "type": "JobSubmitted",
        "job": job_id,
        "queue": "research",
        "resources": {"gpu": gpu, "cpu": 1000, "memory": 4000},
        **extra,
    }


async def seed_cluster(bootstrap: str, topics: Topics, cluster: str) -> None:
    """One queue and one node, each journaled before the next input is sent."""
    await produce(bootstrap, topics.admin, [QUEUE], key="research")
    await wait_journaled(bootstrap, topics, cluster, lambda r: r.event.type == "QueueConfigured")
    await produce(bootstrap, topics.nodes, [NODE], key="node-a")
    await wait_journaled(bootstrap, topics, cluster, lambda r: r.event.type == "NodeHeartbeat")


async def test_journal_numbers_and_stamps_events_and_dispatches(kafka_bootstrap: str) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await seed_cluster(kafka_bootstrap, topics, cluster)
        await produce(kafka_bootstrap, topics.jobs, [job("job-1")], key="job-1")

        async def dispatched() -> list[tuple[bytes | None, dict[str, Any]]] | None:
            commands = await commands_of(kafka_bootstrap, topics)
            return commands if any(c["type"] == "Dispatch" for _, c in commands) else None

        commands = await wait_for(dispatched, "a Dispatch")

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert all(a.ts <= b.ts for a, b in itertools.pairwise(journal))
    kinds = [r.event.type for r in journal if r.event.type != "Tick"]
    assert kinds == ["QueueConfigured", "NodeHeartbeat", "JobSubmitted"]
    submitted = next(r for r in journal if r.event.type == "JobSubmitted")

    key, dispatch = next((k, c) for k, c in commands if c["type"] == "Dispatch")
    assert key == b"node-a"
    assert dispatch["job"] == "job-1" and dispatch["node"] == "node-a"
    assert dispatch["attempt"] == 1 and dispatch["tasks"] == 1
    assert dispatch["seq"] == submitted.seq and dispatch["ts"] == submitted.ts
    assert dispatch["reason"] == "quota"

    # Every journal record was written with the cluster id as its key.
    raw = await read_raw(kafka_bootstrap, topics.journal)
    assert {r.key for r in raw} == {cluster.encode()}

    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
    assert report.reproduced == report.observed == report.expected >= 1


async def test_a_tick_is_journaled_when_a_timer_is_due(kafka_bootstrap: str) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    config = {"type": "ClusterConfigured", "tick_ms": 100, "heartbeat_timeout_s": 1}
    await produce(kafka_bootstrap, topics.admin, [config])
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await produce(kafka_bootstrap, topics.nodes, [NODE], key="node-a")

        async def ticks() -> list[JournalRecord] | None:
            records = await journal_of(kafka_bootstrap, topics, cluster)
            return records if any(r.event.type == "Tick" for r in records) else None

        journal = await wait_for(ticks, "a Tick at node-a's heartbeat expiry")
    stamps = [r.ts for r in journal]
    assert stamps == sorted(stamps)
    heard = next(r.ts for r in journal if r.event.type == "NodeHeartbeat")
    tick = next(r.ts for r in journal if r.event.type == "Tick")
    assert tick >= heard + 1000  # not before anything was due
    assert stamps.count(tick) == 1  # its own batch: a ts is never reused by a later batch


async def test_restart_rebuilds_state_and_keeps_numbering(kafka_bootstrap: str) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    async with running_scheduler(kafka_bootstrap, topics, cluster) as first:
        await seed_cluster(kafka_bootstrap, topics, cluster)
        await produce(kafka_bootstrap, topics.jobs, [job("job-1", gpu=6)], key="job-1")
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "JobSubmitted"
        )
        seq_before = first.state.seq

    async with running_scheduler(kafka_bootstrap, topics, cluster) as second:
        # Started means rebuilt: the producer and consumer exist before the journal is read,
        # so on a loaded machine their existence alone says nothing about the state yet.
        await wait_for(lambda: _rebuilt(second, seq_before), "the second scheduler to rebuild")
        assert second.state.seq >= seq_before
        assert "job-1" in second.state.jobs  # state came back from the journal
        # job-2 cannot fit next to job-1 (6 + 6 > 8 GPUs) only if job-1 is still known to run.
        await produce(kafka_bootstrap, topics.jobs, [job("job-2", gpu=6)], key="job-2")
        await wait_journaled(
            kafka_bootstrap,
            topics,
            cluster,
            lambda r: r.event.type == "JobSubmitted" and r.event.job == "job-2",
        )

    commands = await commands_of(kafka_bootstrap, topics)
    dispatched = [c["job"] for _, c in commands if c["type"] == "Dispatch"]
    assert dispatched == ["job-1"]
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()


async def _rebuilt(scheduler: Scheduler, seq: int) -> bool:
    return await _true_after_start(scheduler) and scheduler.state.seq >= seq


async def _true_after_start(scheduler: Scheduler) -> bool:
    return scheduler._producer is not None and scheduler._consumer is not None


# --- the replay audit, pure: no broker --------------------------------------------------


def _journal() -> list[JournalRecord]:
    return [
        JournalRecord(seq=1, ts=10, event=QueueConfigured.model_validate(QUEUE)),
        JournalRecord(seq=2, ts=11, event=NodeHeartbeat.model_validate(NODE)),
        JournalRecord(seq=3, ts=12, event=JobSubmitted.model_validate(job("j1"))),
        JournalRecord(seq=4, ts=12, event=JobSubmitted.model_validate(job("j2"))),
    ]


def _observed() -> list[dict[str, Any]]:
    commands, _, _ = expected_commands(_journal())
    return [orjson.loads(orjson.dumps(c.to_wire())) for c in commands]


def test_audit_reproduces_the_commands_the_journal_explains() -> None:
    observed = _observed()
    assert [(c["job"], c["seq"], c["ts"]) for c in observed] == [("j1", 4, 12), ("j2", 4, 12)]
    report = audit(_journal(), observed)
    assert report.ok and report.first_divergence is None
    assert (report.journal_records, report.last_seq) == (4, 4)
    assert report.expected == report.observed == report.reproduced == 2
    assert "every command reproduced" in report.summary()
    # The same commands given per node key.
    assert audit(_journal(), {"node-a": observed}).ok


def test_audit_names_the_first_divergence() -> None:
    observed = _observed()
    observed[1] = {**observed[1], "attempt": 2}
    report = audit(_journal(), observed)
    assert not report.ok and report.reproduced == 1
    first = report.first_divergence
    assert first is not None
    assert (first.seq, first.node, first.index) == (4, "node-a", 1)
    assert first.expected is not None and first.expected["attempt"] == 1
    assert first.observed is not None and first.observed["attempt"] == 2
    assert "seq 4, node node-a" in report.summary()


def test_audit_reports_missing_and_unexplained_commands() -> None:
    observed = _observed()
    missing = audit(_journal(), observed[:1])
    assert missing.first_divergence is not None and missing.first_divergence.observed is None

    stray = {**observed[0], "node": "node-z"}
    extra = audit(_journal(), [*observed, stray])
    assert extra.first_divergence is not None
    assert extra.first_divergence.node == "node-z" and extra.first_divergence.expected is None

    # A command from a transaction newer than the journal read is counted, not judged.
    newer = {**observed[0], "seq": 99}
    later = audit(_journal(), [*observed, newer])
    assert later.ok and later.beyond_journal == 1


async def test_failed_transaction_is_redone_from_journal_and_offsets(
    kafka_bootstrap: str,
) -> None:
    from aiokafka.errors import KafkaConnectionError

    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    async with running_scheduler(kafka_bootstrap, topics, cluster) as scheduler:
        await seed_cluster(kafka_bootstrap, topics, cluster)
        producer = scheduler._producer
        assert producer is not None
        real = producer.send_offsets_to_transaction
        failures: list[Any] = []

        async def flaky(offsets: Any, group_id: str) -> None:
            if not failures:
                failures.append(offsets)
                raise KafkaConnectionError("broker went away (injected)")
            await real(offsets, group_id)

        producer.send_offsets_to_transaction = flaky
        await produce(kafka_bootstrap, topics.jobs, [job("job-1"), job("job-2")])

        async def both_dispatched() -> list[tuple[bytes | None, dict[str, Any]]] | None:
            commands = await commands_of(kafka_bootstrap, topics)
            jobs = {c["job"] for _, c in commands if c["type"] == "Dispatch"}
            return commands if jobs == {"job-1", "job-2"} else None

        commands = await wait_for(both_dispatched, "both jobs dispatched")

    assert failures, "the injected failure never happened"
    dispatches = [c["job"] for _, c in commands if c["type"] == "Dispatch"]
    assert sorted(dispatches) == ["job-1", "job-2"]
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    submitted = [r.event.job for r in journal if r.event.type == "JobSubmitted"]
    assert sorted(submitted) == ["job-1", "job-2"]
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert await read_raw(kafka_bootstrap, topics.rejected) == []
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
