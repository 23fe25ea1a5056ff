"""The scheduler as a real process: SIGKILL mid-stream loses and duplicates nothing; a second instance fences the first (real Kafka)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streams.replay import replay
from tests.streams.test_sequencer import journal_of, make_topics, produce, wait_journaled
from tests.support.flow import (
    CAPACITY,
    QUEUE,
    ROOT,
    SchedulerProcess,
    stream_with_kills,
    wait_for,
)
from tests.support.outcome import outcome

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

JOBS = 300
KILL_AT = (100, 200)


async def test_sigkill_mid_stream_loses_and_duplicates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    scheduler = SchedulerProcess.sequencer_module(
        kafka_bootstrap, topics, cluster, "scheduler", tmp_path
    )
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
    result = await outcome(kafka_bootstrap, topics, cluster, JOBS)
    # Nothing lost, journaled twice, dispatched twice for an attempt or split over cycles;
    # nothing read twice either (a re-read submission or report would have been refused).
    assert result.ok and result.rejected == 0, (result, result.summary)
    assert result.report.observed == result.report.expected == result.commands


async def test_second_scheduler_fences_the_first(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    first = SchedulerProcess.sequencer_module(kafka_bootstrap, topics, cluster, "first", tmp_path)
    second = SchedulerProcess.sequencer_module(kafka_bootstrap, topics, cluster, "second", tmp_path)
    first.start()
    try:
        await produce(
            kafka_bootstrap,
            topics.admin,
            [{"type": "QueueConfigured", "queue": "team", "resources": {"gpu": {"quota": 8}}}],
        )
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "QueueConfigured"
        )
        second.start()
        # The first instance's next transaction (a Tick at the latest) meets the new epoch.
        exit_code = await asyncio.get_running_loop().run_in_executor(None, first.wait, 120)
        assert exit_code == 0, first.log()
        assert "fenced" in first.log()

        # The survivor carries on from the journal the first one wrote.
        await produce(
            kafka_bootstrap,
            topics.nodes,
            [{"type": "NodeHeartbeat", "node": "node-a", "capacity": CAPACITY}],
        )
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "NodeHeartbeat"
        )
        assert second.proc is not None and second.proc.poll() is None, second.log()
    finally:
        first.terminate()
        assert second.terminate() == 0, second.log()

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert [r.event.type for r in journal if r.event.type != "Tick"] == [
        "QueueConfigured",
        "NodeHeartbeat",
    ]
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()


def test_python_dash_m_entry_point_has_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streams.sequencer", "--help"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        env={**os.environ},
    )
    assert b"--topic-prefix" in result.stdout
