"""The scheduler SIGKILLed while it writes snapshots: restarts from them, loses and repeats nothing (real Kafka)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.kafka_io import Topics, idempotent_producer, read_to_end
from streams.replay import replay
from streams.snapshots import read_snapshots
from tests.e2e.test_crash_recovery import SchedulerProcess, node_agents
from tests.streams.test_sequencer import (
    commands_of,
    journal_of,
    make_topics,
    produce,
    wait_for,
    wait_journaled,
)

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

JOBS = 180
KILL_AT = (45, 90, 135)
SNAPSHOT_EVERY = 3  # records: nearly every transaction carries a snapshot


class SnapshottingScheduler(SchedulerProcess):
    def __init__(self, bootstrap: str, topics: Topics, cluster: str, log_dir: Path) -> None:
        super().__init__(bootstrap, topics, cluster, log_dir)
        self.args += ["--snapshot-records", str(SNAPSHOT_EVERY)]

    def logs(self) -> list[str]:
        return [
            (self.log_dir / f"scheduler-{run}.log").read_text(errors="replace")
            for run in range(1, self.runs + 1)
        ]


async def test_sigkill_while_snapshots_are_written_restarts_from_them_exactly(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    scheduler = SnapshottingScheduler(kafka_bootstrap, topics, cluster, tmp_path)
    scheduler.start()
    await wait_for(scheduler.started, "the scheduler")
    kills = 0
    try:
        await produce(
            kafka_bootstrap,
            topics.admin,
            [{"type": "QueueConfigured", "queue": "team", "resources": {"gpu": {"quota": 16}}}],
        )
        await wait_journaled(
            kafka_bootstrap, topics, cluster, lambda r: r.event.type == "QueueConfigured"
        )
        async with node_agents(kafka_bootstrap, topics):
            producer = idempotent_producer(kafka_bootstrap)
            await producer.start()
            try:
                for index in range(JOBS):
                    submitted = {
                        "type": "JobSubmitted",
                        "job": f"job-{index:03d}",
                        "queue": "team",
                        "tasks": 1 + index % 3,
                        "resources": {"gpu": 1, "cpu": 2000, "memory": 8000},
                    }
                    await producer.send_and_wait(
                        topics.jobs, orjson.dumps(submitted), key=submitted["job"].encode()
                    )
                    if index in KILL_AT:
                        # Jobs, agent reports and snapshots are all in flight here.
                        scheduler.kill()
                        kills += 1
                        await asyncio.sleep(0.3)
                        scheduler.start()
                        await wait_for(scheduler.started, "the restarted scheduler")
                    elif index % 10 == 0:
                        await asyncio.sleep(0.05)
            finally:
                await producer.stop()

            async def all_finished() -> list[Any] | None:
                journal = await journal_of(kafka_bootstrap, topics, cluster)
                finished = {r.event.job for r in journal if r.event.type == "JobFinished"}
                return journal if len(finished) >= JOBS else None

            await wait_for(all_finished, f"all {JOBS} jobs to finish", timeout_s=180)
        assert scheduler.terminate() == 0, scheduler.log()
    finally:
        with contextlib.suppress(Exception):
            scheduler.terminate()

    assert kills == len(KILL_AT)
    # Every restart started from a snapshot, not from the journal's beginning.
    for log in scheduler.logs()[1:]:
        assert "state from the snapshot at seq" in log, log

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert all(a.ts <= b.ts for a, b in itertools.pairwise(journal))
    submissions = Counter(r.event.job for r in journal if r.event.type == "JobSubmitted")
    assert set(submissions) == {f"job-{i:03d}" for i in range(JOBS)}
    assert max(submissions.values()) == 1

    commands = [c for _, c in await commands_of(kafka_bootstrap, topics)]
    dispatches = [c for c in commands if c["type"] == "Dispatch"]
    assert max(Counter((c["job"], c["attempt"], c["node"]) for c in dispatches).values()) == 1
    assert {c["job"] for c in dispatches} == set(submissions)
    rejected = (await read_to_end(kafka_bootstrap, topics.rejected))[topics.rejected]
    assert [r.value for r in rejected] == []

    snapshots = await read_snapshots(kafka_bootstrap, topics.snapshots, cluster)
    assert len(snapshots) >= 10
    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
    assert report.reproduced == report.observed == report.expected == len(commands)
    assert report.snapshots_reproduced == len(snapshots)
    assert "every command reproduced" in report.summary()
    assert "every snapshot reproduced" in report.summary()
