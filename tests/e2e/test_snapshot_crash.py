"""The scheduler SIGKILLed while it writes snapshots: restarts from them, loses and repeats nothing (real Kafka)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from streams.replay_sources import read_snapshots
from tests.streams.test_sequencer import make_topics, produce, wait_journaled
from tests.support.flow import (
    QUEUE,
    SchedulerProcess,
    stream_with_kills,
    wait_for,
)
from tests.support.outcome import outcome

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

JOBS = 180
KILL_AT = (45, 90, 135)
SNAPSHOT_EVERY = 3  # records: nearly every transaction carries a snapshot


async def test_sigkill_while_snapshots_are_written_restarts_from_them_exactly(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    scheduler = SchedulerProcess.sequencer_module(
        kafka_bootstrap, topics, cluster, "scheduler", tmp_path
    )
    scheduler.args += ["--snapshot-records", str(SNAPSHOT_EVERY)]
    scheduler.start()
    await wait_for(lambda: asyncio.sleep(0, scheduler.active()), "the scheduler")
    try:
        await produce(kafka_bootstrap, topics.admin, [QUEUE])
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "QueueConfigured"
        )
        await stream_with_kills(kafka_bootstrap, topics, cluster, scheduler, JOBS, KILL_AT)
    finally:
        scheduler.terminate()

    assert scheduler.runs == 1 + len(KILL_AT)
    # Every restart started from a snapshot, not from the journal's beginning.
    for log in scheduler.logs()[1:]:
        assert "state from the snapshot at seq" in log, log

    result = await outcome(kafka_bootstrap, topics, cluster, JOBS)
    assert result.ok and result.rejected == 0, (result, result.summary)
    snapshots = await read_snapshots(kafka_bootstrap, topics.snapshots, cluster)
    assert len(snapshots) >= 10
    report = result.report
    assert report.observed == report.expected == result.commands
    assert report.snapshots_reproduced == len(snapshots)
    assert "every command reproduced" in report.summary()
    assert "every snapshot reproduced" in report.summary()
