"""The agent's capture of each attempt's output: files on the node and records on quotaflow.logs (I/O shell).

Each attempt of a job on this node writes `<logs dir>/<job>/attempt-<N>.stdout` and
`.stderr` (the logs dir is `<state dir>/<topic prefix><node>.logs`), byte for byte, and
hands the same output to a `LogShipper`, which sends it to `quotaflow.logs` keyed by job
(record format: streams/job_logs.py). The shipper's queue is bounded: when Kafka is slower
than a job's output, chunks are dropped from the topic (never from the files) and the
attempt's LogEnd says how many bytes. A job never waits for its logs to be shipped.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import re
from pathlib import Path
from typing import IO

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams.job_logs import chunk_record, end_record
from streams.kafka_io import now_ms

log = logging.getLogger("quotaflow.agent")

QUEUE_RECORDS = 2048  # at most 2048 x 64 KiB in memory waiting for Kafka
_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


class LogShipper:
    """Sends log records to one topic in the background; drops them (counted) when behind."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.enabled = True  # False when the topic does not exist: output stays in the files
        self._queue: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(QUEUE_RECORDS)

    def offer(self, key: str, value: bytes) -> bool:
        """Queues a record; False when it is not shipped (queue full, or no topic)."""
        if not self.enabled:
            return False
        try:
            self._queue.put_nowait((key.encode(), value))
        except asyncio.QueueFull:
            return False
        return True

    async def run(self, producer: AIOKafkaProducer) -> None:
        while True:
            key, value = await self._queue.get()
            try:
                await producer.send(self.topic, value, key=key)
            except KafkaError as exc:  # the files keep it; the job goes on
                log.warning("could not ship a log record to %s: %r", self.topic, exc)


class AttemptLog:
    """One attempt's output on this node: two files and the records shipped for it."""

    def __init__(
        self,
        directory: Path | None,
        shipper: LogShipper | None,
        job: str,
        node: str,
        attempt: int,
    ) -> None:
        self.job, self.node, self.attempt = job, node, attempt
        self._shipper = shipper
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")
        }
        self._files: dict[str, IO[bytes]] = {}
        self.paths: dict[str, Path] = {}
        if directory is not None:
            folder = directory / _UNSAFE.sub("_", job)
            folder.mkdir(parents=True, exist_ok=True)
            for name in ("stdout", "stderr"):
                path = folder / f"attempt-{attempt}.{name}"
                self.paths[name] = path
                self._files[name] = path.open("ab")
        self.dropped = 0

    def write(self, stream: str, data: bytes) -> None:
        """Output read from the task's `stream` ("stdout" or "stderr")."""
        file = self._files.get(stream)
        if file is not None:
            file.write(data)
            file.flush()
        self._ship(stream, self._decoders[stream].decode(data), len(data))

    def note(self, text: str) -> None:
        """A line from the agent itself about this attempt (e.g. why it could not start)."""
        self.write("stderr", f"quotaflow agent: {text}\n".encode())

    def close(self, exit_code: int | None, reason: str | None) -> None:
        for name, decoder in self._decoders.items():
            self._ship(name, decoder.decode(b"", final=True), 0)
        for file in self._files.values():
            file.close()
        self._files.clear()
        if self._shipper is not None:
            record = end_record(
                self.job, self.node, self.attempt, now_ms(), exit_code, reason, self.dropped
            )
            self._shipper.offer(self.job, record)  # best effort, as every record

    def _ship(self, stream: str, text: str, size: int) -> None:
        if not text or self._shipper is None:
            return
        record = chunk_record(self.job, self.node, self.attempt, stream, now_ms(), text)
        if not self._shipper.offer(self.job, record):
            self.dropped += size


def logs_dir(state_path: Path | None) -> Path | None:
    """`<state dir>/<stem>.logs` next to the node's state file, or None without one."""
    if state_path is None:
        return None
    return state_path.with_name(f"{state_path.stem}.logs")
