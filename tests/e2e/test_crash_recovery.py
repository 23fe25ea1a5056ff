"""The scheduler as a real process: SIGKILL mid-stream loses and duplicates nothing; a second instance fences the first (real Kafka)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from streams.kafka_io import Topics, idempotent_producer, read_committed_consumer, read_to_end
from streams.replay import replay
from tests.streams.test_sequencer import (
    commands_of,
    journal_of,
    make_topics,
    produce,
    wait_for,
    wait_journaled,
)

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
JOBS = 300
NODES = [f"node-{i}" for i in range(4)]
CAPACITY = {"gpu": 8, "cpu": 64000, "memory": 256000}


class SchedulerProcess:
    """`python -m streams.sequencer` in its own process, its log in a file."""

    def __init__(self, bootstrap: str, topics: Topics, cluster: str, log_dir: Path) -> None:
        self.args = [
            sys.executable,
            "-m",
            "streams.sequencer",
            "--bootstrap",
            bootstrap,
            "--cluster",
            cluster,
            "--topic-prefix",
            topics.prefix,
            "--log-level",
            "INFO",
        ]
        self.log_dir = log_dir
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_dir / "scheduler-0.log"

    def start(self) -> None:
        self.runs += 1
        self.log_path = self.log_dir / f"scheduler-{self.runs}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def started(self) -> bool:
        """True once this run has rebuilt its state and reads inputs (its "started" log line)."""
        assert self.proc is not None and self.proc.poll() is None, self.log()
        return " started: journal at seq " in self.log()


@contextlib.asynccontextmanager
async def node_agents(bootstrap: str, topics: Topics) -> AsyncIterator[None]:
    """Fake node agents: heartbeat every node, start and finish every dispatched job at once."""
    producer = idempotent_producer(bootstrap)
    await producer.start()
    stop = asyncio.Event()

    async def heartbeats() -> None:
        while not stop.is_set():
            for node in NODES:
                beat = {"type": "NodeHeartbeat", "node": node, "capacity": CAPACITY}
                await producer.send_and_wait(topics.nodes, orjson.dumps(beat), key=node.encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async def answer() -> None:
        consumer = read_committed_consumer(bootstrap)
        await consumer.start()
        try:
            consumer.subscribe([topics.commands])
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for record in records:
                        await _answer(producer, topics, orjson.loads(record.value))
        finally:
            await consumer.stop()

    tasks = [asyncio.create_task(heartbeats()), asyncio.create_task(answer())]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await producer.stop()


async def _answer(producer: AIOKafkaProducer, topics: Topics, command: dict[str, Any]) -> None:
    ref = {"job": command["job"], "node": command["node"], "attempt": command["attempt"]}
    if command["type"] == "Dispatch":
        replies = [
            {"type": "JobStarted", **ref},
            {"type": "JobFinished", **ref, "outcome": "succeeded"},
        ]
    else:
        replies = [{"type": "JobPreempted", **ref}]
    for reply in replies:
        await producer.send_and_wait(
            topics.nodes, orjson.dumps(reply), key=command["node"].encode()
        )


async def test_sigkill_mid_stream_loses_and_duplicates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    scheduler = SchedulerProcess(kafka_bootstrap, topics, cluster, tmp_path)
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
                    if index in (100, 200):
                        # Kill while inputs, journal writes and commands are in flight.
                        scheduler.kill()
                        kills += 1
                        await asyncio.sleep(0.3)
                        scheduler.start()
                        # The next kill must hit a running scheduler, not one still starting.
                        await wait_for(scheduler.started, "the restarted scheduler")
                    elif index % 10 == 0:
                        await asyncio.sleep(0.05)
            finally:
                await producer.stop()

            async def all_finished() -> list[Any] | None:
                journal = await journal_of(kafka_bootstrap, topics, cluster)
                finished = {r.event.job for r in journal if r.event.type == "JobFinished"}
                return journal if len(finished) >= JOBS else None

            journal = await wait_for(all_finished, f"all {JOBS} jobs to finish")
        assert scheduler.terminate() == 0, scheduler.log()
    finally:
        with contextlib.suppress(Exception):
            scheduler.terminate()

    assert kills == 2
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))
    assert all(a.ts <= b.ts for a, b in itertools.pairwise(journal))

    # No job lost, none journaled twice.
    submissions = Counter(r.event.job for r in journal if r.event.type == "JobSubmitted")
    assert set(submissions) == {f"job-{i:03d}" for i in range(JOBS)}
    assert max(submissions.values()) == 1

    # No job dispatched twice for the same attempt: one Dispatch per (job, attempt, node),
    # and all of an attempt's Dispatches come from one cycle (one seq).
    commands = [c for _, c in await commands_of(kafka_bootstrap, topics)]
    dispatches = [c for c in commands if c["type"] == "Dispatch"]
    per_placement = Counter((c["job"], c["attempt"], c["node"]) for c in dispatches)
    assert max(per_placement.values()) == 1
    seqs: dict[tuple[str, int], set[int]] = {}
    for c in dispatches:
        seqs.setdefault((c["job"], c["attempt"]), set()).add(c["seq"])
    assert all(len(s) == 1 for s in seqs.values())
    assert {c["job"] for c in dispatches} == set(submissions)

    # Nothing was read twice: a re-read submission or agent report would have been refused.
    rejected = (await read_to_end(kafka_bootstrap, topics.rejected))[topics.rejected]
    assert [r.value for r in rejected] == []

    report = await replay(kafka_bootstrap, topics.prefix, cluster)
    assert report.ok, report.summary()
    assert report.reproduced == report.observed == report.expected == len(commands)


async def test_second_scheduler_fences_the_first(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    first = SchedulerProcess(kafka_bootstrap, topics, cluster, tmp_path / "first")
    second = SchedulerProcess(kafka_bootstrap, topics, cluster, tmp_path / "second")
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
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
