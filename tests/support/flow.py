"""Jobs streaming through real scheduler processes and fake node agents (test and chaos support, I/O).

The lost / duplicated / reproduced checks of a run are in tests/support/outcome.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from streams.kafka_io import Topics, idempotent_producer, read_committed_consumer
from streams.replay import read_journal

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"node-{i}" for i in range(4)]
CAPACITY = {"gpu": 8, "cpu": 64000, "memory": 256000}
QUEUE = {"type": "QueueConfigured", "queue": "team", "resources": {"gpu": {"quota": 16}}}


def quotaflow_command() -> list[str]:
    script = Path(sys.executable).parent / "quotaflow"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli"]


class SchedulerProcess:
    """One scheduler process with its log in a file, one file per run.

    By default ``quotaflow scheduler`` with leader election on and a replicated journal;
    ``sequencer_module`` runs ``python -m streams.sequencer`` (no election) instead.
    """

    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        cluster: str,
        name: str,
        log_dir: Path,
        *,
        replicated: bool = True,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.args = [
            *quotaflow_command(),
            "scheduler",
            "--bootstrap",
            bootstrap,
            "--topic-prefix",
            topics.prefix,
            "--cluster",
            cluster,
            "--instance",
            name,
        ]
        if replicated:
            self.args += ["--replication-factor", "3", "--min-insync-replicas", "2"]
        self.args += list(extra_args)
        self.log_dir = log_dir
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_dir / f"{name}-0.log"

    @classmethod
    def sequencer_module(
        cls, bootstrap: str, topics: Topics, cluster: str, name: str, log_dir: Path
    ) -> SchedulerProcess:
        """``python -m streams.sequencer``: one instance, no leader election."""
        process = cls(bootstrap, topics, cluster, name, log_dir, replicated=False)
        process.args = [
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
        return process

    def start(self) -> None:
        self.runs += 1
        self.log_path = self.log_dir / f"{self.name}-{self.runs}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        os.killpg(self.proc.pid, signal.SIGKILL)
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

    def logs(self) -> list[str]:
        """Every run's log, oldest first."""
        return [
            (self.log_dir / f"{self.name}-{run}.log").read_text(errors="replace")
            for run in range(1, self.runs + 1)
        ]

    def active(self) -> bool:
        """Whether this run has become the active scheduler and started sequencing."""
        return self.alive() and " started: journal at seq " in self.log()


async def wait_for(probe: Callable[[], Awaitable[Any]], what: str, timeout_s: float = 180) -> Any:
    """Polls ``probe`` until it returns something truthy; generous for a loaded machine.

    A probe that fails (a client meeting a broker that was just killed) counts as not yet.
    """
    deadline = time.monotonic() + timeout_s
    problem: Exception | None = None
    while True:
        try:
            result = await probe()
        except Exception as exc:
            result, problem = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} (last problem: {problem!r})")
        await asyncio.sleep(0.2)


async def send(producer: AIOKafkaProducer, topic: str, value: dict[str, Any], key: str) -> None:
    """Send and wait; a send that times out during a leader election is sent again.

    A resent record that had in fact arrived is a duplicate input: the scheduler refuses it
    (a duplicate job id) or journals it as a report that changes nothing.
    """
    for attempt in range(30):
        try:
            await producer.send_and_wait(topic, orjson.dumps(value), key=key.encode())
            return
        except Exception:
            if attempt == 29:
                raise
            await asyncio.sleep(1)


@contextlib.asynccontextmanager
async def node_agents(bootstrap: str, topics: Topics) -> AsyncIterator[None]:
    """Fake node agents: heartbeat every node, start and finish every Dispatch at once."""
    producer = idempotent_producer(bootstrap)
    await producer.start()
    stop = asyncio.Event()

    async def heartbeats() -> None:
        while not stop.is_set():
            for node in NODES:
                beat = {"type": "NodeHeartbeat", "node": node, "capacity": CAPACITY}
                await send(producer, topics.nodes, beat, node)
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
                        command = orjson.loads(record.value)
                        ref = {k: command[k] for k in ("job", "node", "attempt")}
                        if command["type"] == "Dispatch":
                            replies = [
                                {"type": "JobStarted", **ref},
                                {"type": "JobFinished", **ref, "outcome": "succeeded"},
                            ]
                        else:
                            replies = [{"type": "JobPreempted", **ref}]
                        for reply in replies:
                            await send(producer, topics.nodes, reply, command["node"])
        finally:
            await consumer.stop()

    tasks = [asyncio.create_task(heartbeats()), asyncio.create_task(answer())]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await producer.stop()


def job(index: int) -> dict[str, Any]:
    return {
        "type": "JobSubmitted",
        "job": f"job-{index:04d}",
        "queue": "team",
        "tasks": 1 + index % 3,
        "resources": {"gpu": 1, "cpu": 2000, "memory": 8000},
    }


async def stream_jobs(
    bootstrap: str,
    topics: Topics,
    indexes: range,
    during: Callable[[int], Awaitable[None]] | None = None,
) -> None:
    """Submit the jobs one by one, awaiting ``during(index)`` after each (to kill things)."""
    producer = idempotent_producer(bootstrap)
    await producer.start()
    try:
        for index in indexes:
            submitted = job(index)
            await send(producer, topics.jobs, submitted, submitted["job"])
            if during is not None:
                await during(index)
            if index % 10 == 0:
                await asyncio.sleep(0.05)
    finally:
        await producer.stop()


async def all_finished(bootstrap: str, topics: Topics, cluster: str, jobs: int) -> bool:
    journal = await read_journal(bootstrap, topics.prefix, cluster)
    finished = {r.event.job for r in journal if r.event.type == "JobFinished"}
    return len(finished) >= jobs


async def stream_with_kills(
    bootstrap: str,
    topics: Topics,
    cluster: str,
    scheduler: SchedulerProcess,
    jobs: int,
    kill_at: tuple[int, ...],
) -> None:
    """With fake agents answering, streams ``jobs`` jobs and SIGKILLs and restarts the
    scheduler after each index in ``kill_at`` (inputs, journal writes, commands and snapshots
    in flight), then waits until every job has finished and stops it cleanly."""
    async with node_agents(bootstrap, topics):

        async def during(index: int) -> None:
            if index in kill_at:
                scheduler.kill()
                await asyncio.sleep(0.3)
                scheduler.start()
                # The next kill must hit a running scheduler, not one still starting.
                await wait_for(
                    lambda: asyncio.sleep(0, scheduler.active()), "the restarted scheduler"
                )

        await stream_jobs(bootstrap, topics, range(jobs), during)
        await wait_for(lambda: all_finished(bootstrap, topics, cluster, jobs), f"all {jobs} jobs")
    assert scheduler.terminate() == 0, scheduler.log()


async def partition_leader(bootstrap: str, topic: str) -> int:
    """The node id leading partition 0 of ``topic`` (-1 while there is none)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for entry in described:
        for partition in entry["partitions"]:
            if partition["partition"] == 0:
                return int(partition["leader"])
    return -1
