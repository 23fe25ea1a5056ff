"""`quotaflow projections` as a real process, and a test-played node agent, for the projections' end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from streams.kafka_io import Topics, idempotent_producer, read_committed_consumer
from tests.streams.test_sequencer import wait_for

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return orjson.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )


class Projections:
    """`quotaflow projections` as a real process."""

    def __init__(
        self, bootstrap: str, topics: Topics, port: int, log: Path, interval_s: float = 0.5
    ) -> None:
        self.checkpoint = log.with_name("projections.checkpoint")
        self.args = [
            sys.executable, "-m", "cli", "projections",
            "--bootstrap", bootstrap, "--topic-prefix", topics.prefix, "--port", str(port),
            "--checkpoint", str(self.checkpoint), "--checkpoint-interval", str(interval_s),
        ]  # fmt: skip
        self.port = port
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env=os.environ | {"PYTHONPATH": str(ROOT)},
            )  # fmt: skip

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int | None:
        """SIGTERM, then the exit code (None: killed after 30 s without exiting)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return None
        return None if self.proc is None else self.proc.returncode

    async def caught_up(self, seq: int) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            health = http(self.port, "/health")
            return health if health and health["seq"] >= seq else None

        return await wait_for(
            probe, f"projections to fold up to seq {seq} (log: {self.log})", timeout_s=WAIT_S
        )

    async def checkpointed(self, seq: int) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            health = http(self.port, "/health")
            return health if health and health["checkpoint"]["seq"] == seq else None

        return await wait_for(
            probe, f"a checkpoint at seq {seq} (log: {self.log})", timeout_s=WAIT_S
        )


class Agent:
    """The test plays the node agent: answers commands as told, reports finishes on demand."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.producer: AIOKafkaProducer = idempotent_producer(bootstrap)
        self.consumer = read_committed_consumer(bootstrap)
        self.commands: list[dict[str, Any]] = []

    async def start(self) -> None:
        await self.producer.start()
        await self.consumer.start()
        self.consumer.subscribe([self.topics.commands])

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.producer.stop()

    async def send(self, topic: str, key: str, *values: dict[str, Any]) -> None:
        for value in values:
            await self.producer.send_and_wait(topic, orjson.dumps(value), key=key.encode())

    async def expect(self, count: int) -> list[dict[str, Any]]:
        """Waits for `count` more commands; answers them as an agent that obeys at once."""
        wanted = len(self.commands) + count

        async def probe() -> bool:
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                self.commands += [orjson.loads(r.value) for r in records]
            return len(self.commands) >= wanted

        await wait_for(probe, f"{count} command(s)", timeout_s=WAIT_S)
        fresh = self.commands[wanted - count : wanted]
        for command in fresh:
            kind = "JobStarted" if command["type"] == "Dispatch" else "JobPreempted"
            answer = {
                "type": kind,
                "job": command["job"],
                "node": command["node"],
                "attempt": command["attempt"],
            }
            await self.send(self.topics.nodes, command["node"], answer)
        return fresh

    async def finish(self, command: dict[str, Any]) -> None:
        done = {
            "type": "JobFinished", "job": command["job"], "node": command["node"],
            "attempt": command["attempt"], "outcome": "succeeded",
        }  # fmt: skip
        await self.send(self.topics.nodes, command["node"], done)


def stable(body: Any) -> Any:
    """A view body without the parts that only say how far the view has read."""
    if isinstance(body, dict):
        return {
            k: stable(v) for k, v in body.items() if k not in ("as_of", "as_of_ts", "as_of_seq")
        }
    if isinstance(body, list):
        return [stable(v) for v in body]
    return body
