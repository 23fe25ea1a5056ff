"""Jobs' output on quotaflow.logs: the record format the agent writes and the reader `quotaflow logs` uses (I/O shell).

Records are keyed by job id (so one job's output stays in order on one partition) and are
JSON objects:

- `{"type": "LogChunk", "job", "node", "attempt", "stream": "stdout"|"stderr", "ts", "text"}`:
  output as the agent read it (chunks of up to 64 KiB, not necessarily whole lines; bytes
  that are not UTF-8 are replaced);
- `{"type": "LogEnd", "job", "node", "attempt", "ts", "exit_code", "reason", "dropped"}`:
  the attempt's process on that node ended (`exit_code` null when it never started or was
  stopped before it could be read; `dropped`: bytes kept only in the node's file because
  the agent could not ship them fast enough).

The topic is not part of the scheduler's contract: nothing reads it to decide anything, and
Kafka deletes old records (streams/kafka_io.py, TOPIC_CONFIGS). The files on the node
(docs/agent.md) keep everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import TopicPartition

from streams.agent_config import partition_for
from streams.kafka_io import partitions_of, read_committed_consumer

POLL_MS = 300


def chunk_record(job: str, node: str, attempt: int, stream: str, ts: int, text: str) -> bytes:
    body = {"type": "LogChunk", "job": job, "node": node, "attempt": attempt}
    return orjson.dumps({**body, "stream": stream, "ts": ts, "text": text})


def end_record(
    job: str,
    node: str,
    attempt: int,
    ts: int,
    exit_code: int | None,
    reason: str | None,
    dropped: int = 0,
) -> bytes:
    body = {"type": "LogEnd", "job": job, "node": node, "attempt": attempt, "ts": ts}
    return orjson.dumps({**body, "exit_code": exit_code, "reason": reason, "dropped": dropped})


class LogsNotFound(LookupError):
    """No output of the job (or of that attempt) is on the topic."""


@dataclass
class _Selection:
    """Which records to print: one job, one attempt (None: the latest seen), maybe one node."""

    job: str
    attempt: int | None
    node: str | None
    seen_attempts: set[int] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)  # nodes that wrote the selected attempt
    ended: set[str] = field(default_factory=set)  # ... and of those, the ones that ended it
    ends: list[dict[str, Any]] = field(default_factory=list)

    def wants(self, record: dict[str, Any]) -> bool:
        if record.get("job") != self.job:
            return False
        if self.node is not None and record.get("node") != self.node:
            return False
        return record.get("attempt") == self.attempt

    def note(self, record: dict[str, Any]) -> None:
        node = str(record.get("node"))
        self.nodes.add(node)
        if record.get("type") == "LogEnd":
            self.ended.add(node)
            self.ends.append(record)

    @property
    def complete(self) -> bool:
        return bool(self.nodes) and self.nodes <= self.ended


async def print_logs(
    bootstrap: str,
    topic: str,
    job: str,
    write: Callable[[str], None],
    *,
    attempt: int | None = None,
    node: str | None = None,
    follow: bool = False,
) -> list[dict[str, Any]]:
    """Writes the job's output (one attempt: the latest unless given) and returns its LogEnd
    records. With `follow`, waits for more until every node running the attempt has ended
    it (or for the job's first output when there is none yet)."""
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    try:
        every = await partitions_of(bootstrap, [topic])
        # Keyed by job: only the partition the key hashes to holds its records.
        partitions = [every[partition_for(job, len(every))]]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records = await _read_until(consumer, partitions, ends, job)
        selection = _Selection(job, attempt, node)
        for record in records:
            if record.get("job") == job and (node is None or record.get("node") == node):
                selection.seen_attempts.add(int(record.get("attempt", 0)))
        if selection.attempt is None and selection.seen_attempts:
            selection.attempt = max(selection.seen_attempts)
        if selection.attempt is None and not follow:
            raise LogsNotFound(f"no output of job {job} on {topic}")
        if selection.attempt not in selection.seen_attempts and not follow:
            seen = ", ".join(str(a) for a in sorted(selection.seen_attempts))
            raise LogsNotFound(f"no output of job {job} attempt {selection.attempt} (seen: {seen})")
        _emit(records, selection, write)
        while follow and not selection.complete:
            batch = await consumer.getmany(*partitions, timeout_ms=POLL_MS)
            fresh = [_decode(r.value) for rs in batch.values() for r in rs if r.key == job.encode()]
            fresh_records = [r for r in fresh if r is not None]
            if selection.attempt is None:
                mine = [r for r in fresh_records if node is None or r.get("node") == node]
                if mine:
                    selection.attempt = int(mine[0].get("attempt", 0))
            _emit(fresh_records, selection, write)
        return selection.ends
    finally:
        await consumer.stop()


def _emit(
    records: list[dict[str, Any]], selection: _Selection, write: Callable[[str], None]
) -> None:
    for record in records:
        if not selection.wants(record):
            continue
        selection.note(record)
        if record.get("type") == "LogChunk":
            write(str(record.get("text", "")))


async def _read_until(
    consumer: Any, partitions: list[TopicPartition], ends: dict[TopicPartition, int], job: str
) -> list[dict[str, Any]]:
    key = job.encode()
    records: list[dict[str, Any]] = []
    remaining = {tp for tp in partitions if ends[tp] > 0}
    while remaining:
        batch = await consumer.getmany(*remaining, timeout_ms=POLL_MS)
        for rs in batch.values():
            for r in rs:
                if r.key == key:  # records past the end are kept: a follow goes on after them
                    decoded = _decode(r.value)
                    if decoded is not None:
                        records.append(decoded)
        for tp in list(remaining):
            if await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
        await asyncio.sleep(0)
    return records


def _decode(raw: bytes | None) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
