"""Snapshots against a real broker: written after their batch, loaded on start, passed over when bad."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest

from domain.decider import close_group, fold, initial_state
from domain.events import JournalRecord
from domain.snapshot import encode_state
from domain.state import State
from streams.kafka_io import Topics, idempotent_producer, read_to_end
from streams.metrics import SchedulerMonitor
from streams.replay import read_journal, replay
from streams.replay_sources import read_snapshots
from streams.sequencer import Scheduler
from streams.snapshots import Manifest, SnapshotWriter, manifest_key
from tests.streams.test_sequencer import (
    WAIT_S,
    job,
    make_topics,
    produce,
    seed_cluster,
    wait_for,
    wait_journaled,
)


@contextlib.asynccontextmanager
async def scheduler_with_snapshots(
    bootstrap: str,
    topics: Topics,
    cluster: str,
    every: int = 2,
    monitor: SchedulerMonitor | None = None,
) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(
        bootstrap, cluster, topics.prefix, snapshot_records=every, monitor=monitor
    )
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        await wait_for(lambda: _started(scheduler), "the scheduler to start")
        yield scheduler
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)


async def _started(scheduler: Scheduler) -> bool:
    return scheduler._consumer is not None and scheduler._producer is not None


async def full_fold_bytes(bootstrap: str, topics: Topics, cluster: str) -> tuple[int, bytes]:
    state = initial_state()
    for record in await read_journal(bootstrap, topics.prefix, cluster):
        state, _ = fold(state, record)
    state, _ = close_group(state)
    return state.seq, encode_state(state)


async def write_history(bootstrap: str, topics: Topics, cluster: str) -> None:
    """A queue, a node and five jobs, each journaled in its own batch (several snapshots)."""
    async with scheduler_with_snapshots(bootstrap, topics, cluster):
        await seed_cluster(bootstrap, topics, cluster)
        for index in range(5):
            await produce(bootstrap, topics.jobs, [job(f"job-{index}")], key=f"job-{index}")

            def submitted(r: JournalRecord, i: int = index) -> bool:
                return r.event.type == "JobSubmitted" and r.event.job == f"job-{i}"

            await wait_journaled(bootstrap, topics, cluster, submitted)


async def test_a_restart_starts_from_the_newest_snapshot_and_equals_a_full_fold(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    await write_history(kafka_bootstrap, topics, cluster)
    snapshots = await read_snapshots(kafka_bootstrap, topics.snapshots, cluster)
    assert len(snapshots) >= 2 and all(body is not None for _, body, _ in snapshots)

    caplog.set_level(logging.INFO, logger="quotaflow.scheduler")
    restarted = Scheduler(kafka_bootstrap, cluster, topics.prefix, snapshot_records=0)
    await restarted.start()
    try:
        seq, expected = await full_fold_bytes(kafka_bootstrap, topics, cluster)
        assert restarted.state.seq == seq
        assert encode_state(restarted.state) == expected
        assert restarted.snapshots.last is not None
        assert restarted.snapshots.last.seq == max(s for s, _, _ in snapshots)
        assert "state from the snapshot at seq" in caplog.text
    finally:
        await restarted.stop()

    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
    assert report.snapshots_reproduced == len(snapshots)
    assert f"{len(snapshots)} snapshots reproduced: every snapshot reproduced" in report.summary()


async def test_snapshots_that_do_not_check_out_are_passed_over_for_an_older_one(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    await write_history(kafka_bootstrap, topics, cluster)
    raw = (await read_to_end(kafka_bootstrap, topics.snapshots))[topics.snapshots]
    manifests = [r for r in raw if r.key and r.key.endswith(b"/manifest") and r.value]
    good = Manifest.from_bytes(manifests[-1].value)
    # Two newer manifests for the same slot: one naming a journal offset that does not hold
    # its seq, then one naming a wrong hash. Both must be passed over for the good one.
    wrong_offset = orjson.loads(manifests[-1].value) | {"journal_offset": 0}
    wrong_hash = orjson.loads(manifests[-1].value) | {"sha256": "0" * 64}
    key = manifest_key(cluster, good.slot).decode()
    await produce(kafka_bootstrap, topics.snapshots, [wrong_offset, wrong_hash], key=key)

    caplog.set_level(logging.INFO)
    restarted = Scheduler(kafka_bootstrap, cluster, topics.prefix, snapshot_records=0)
    await restarted.start()
    try:
        _, expected = await full_fold_bytes(kafka_bootstrap, topics, cluster)
        assert encode_state(restarted.state) == expected
        assert restarted.snapshots.last == good
        assert "passed over: sha256 of the chunks does not match the manifest" in caplog.text
        assert f"snapshot at seq {good.seq} passed over: the journal at offset 0" in caplog.text
    finally:
        await restarted.stop()

    # The audit judges the newest manifest of each slot: the forged hash fails it.
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert not report.ok
    assert f"snapshot at seq {good.seq} not reproduced: sha256" in report.summary()


async def test_garbage_on_the_snapshot_topic_falls_back_to_the_whole_journal(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    async with scheduler_with_snapshots(kafka_bootstrap, topics, cluster, every=0):
        await seed_cluster(kafka_bootstrap, topics, cluster)
    producer = idempotent_producer(kafka_bootstrap)
    await producer.start()
    try:
        for slot in (0, 1):
            await producer.send_and_wait(
                topics.snapshots, b"\x01not json", key=manifest_key(cluster, slot)
            )
    finally:
        await producer.stop()

    caplog.set_level(logging.INFO)
    restarted = Scheduler(kafka_bootstrap, cluster, topics.prefix)
    await restarted.start()
    try:
        _, expected = await full_fold_bytes(kafka_bootstrap, topics, cluster)
        assert encode_state(restarted.state) == expected
        assert restarted.snapshots.last is None
        assert "no usable snapshot; reading the whole journal" in caplog.text
    finally:
        await restarted.stop()


async def test_a_state_that_does_not_encode_costs_the_snapshot_not_the_batch(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried: list[int] = []

    def broken(state: State) -> bytes:
        tried.append(state.seq)
        raise RuntimeError("cannot encode")

    monkeypatch.setattr("streams.snapshots.encode_state", broken)
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    caplog.set_level(logging.INFO)
    # Given a snapshot due every two records, and a state that does not encode
    async with scheduler_with_snapshots(kafka_bootstrap, topics, cluster, every=2):
        # When the second record makes one due, and one more input is journaled
        await seed_cluster(kafka_bootstrap, topics, cluster)  # both inputs journaled
        await produce(kafka_bootstrap, topics.jobs, [job("job-1")], key="job-1")
        await wait_journaled(kafka_bootstrap, topics, cluster, lambda r: r.seq == 3)
    # Then no snapshot was written, and the failed one was not tried again at the next
    # batch: a cadence later, as a snapshot Kafka refuses
    assert await read_snapshots(kafka_bootstrap, topics.snapshots, cluster) == []
    assert "not written: the state did not encode" in caplog.text
    assert tried == [2]


async def test_a_snapshot_kafka_refuses_costs_the_snapshot_not_the_batch(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from streams.topic_admin import TOPIC_CONFIGS, admin_client
    from streams.topics import SNAPSHOTS

    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    # Every snapshot chunk is now too large for the broker, commit markers are not (the other
    # settings as the scheduler wants them: this request replaces them all).
    settings = {**TOPIC_CONFIGS[SNAPSHOTS], "max.message.bytes": "200"}
    admin = admin_client(kafka_bootstrap)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topics.snapshots, settings)]
        )
    finally:
        await admin.close()
    caplog.set_level(logging.INFO)
    monitor = SchedulerMonitor(cluster)
    async with scheduler_with_snapshots(kafka_bootstrap, topics, cluster, 1, monitor):
        await seed_cluster(kafka_bootstrap, topics, cluster)
        await produce(kafka_bootstrap, topics.jobs, [job("job-1")], key="job-1")

        async def dispatched() -> bool:
            raw = await read_to_end(kafka_bootstrap, topics.commands)
            return any(orjson.loads(r.value)["type"] == "Dispatch" for r in raw[topics.commands])

        await wait_for(dispatched, "job-1 dispatched")
    rejected = await read_to_end(kafka_bootstrap, topics.rejected)
    assert rejected[topics.rejected] == []  # no input paid for the refused snapshots
    types = [r.event.type for r in await read_journal(kafka_bootstrap, topics.prefix, cluster)]
    assert types == ["QueueConfigured", "NodeHeartbeat", "JobSubmitted"]
    assert await read_snapshots(kafka_bootstrap, topics.snapshots, cluster) == []
    assert "not written" in caplog.text
    snapshots = "quotaflow_snapshots_total"
    assert (monitor.registry.get_sample_value(snapshots, {"outcome": "refused"}) or 0) >= 1
    assert monitor.registry.get_sample_value(snapshots, {"outcome": "written"}) is None


def test_after_a_refused_snapshot_the_next_is_due_a_cadence_later() -> None:
    writer = SnapshotWriter("snapshots", "c", every_records=10, every_seconds=60, clock=lambda: 0)
    assert writer.due(12, 1_000)
    writer.failed(12, 1_000)
    assert not writer.due(13, 1_001)  # a refused snapshot is not retried at the next batch
    assert writer.due(22, 1_001)  # but after another every_records
    assert writer.due(13, 61_000)  # or every_seconds
