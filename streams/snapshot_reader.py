"""Finding and loading scheduler snapshots on quotaflow.snapshots, newest first, and the journal after one (I/O shell).

The snapshots' layout (chunks and a manifest per slot) is `streams.snapshots`, which writes them.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from domain.codec import decode_journal
from domain.events import JournalRecord
from domain.snapshot import SnapshotError, decode_state, digest
from domain.state import State
from streams.kafka_io import read_committed_consumer
from streams.snapshots import READ_TIMEOUT_S, Manifest, chunk_key, manifest_cluster, no_gc

__all__ = [
    "LoadedSnapshot",
    "assemble_snapshot",
    "newest_first",
    "read_journal_from",
    "snapshot_consumer",
]

log = logging.getLogger("quotaflow.snapshots")


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    manifest: Manifest
    state: State
    body: bytes


async def snapshot_consumer(bootstrap: str, topic: str) -> tuple[AIOKafkaConsumer, TopicPartition]:
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    return consumer, tp


async def _read_range(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int
) -> list[ConsumerRecord[bytes, bytes]]:
    """Committed records of one partition with start <= offset < end."""
    out: list[ConsumerRecord[bytes, bytes]] = []
    if start >= end:
        return out
    consumer.seek(tp, start)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_TIMEOUT_S
    while await consumer.position(tp) < end:
        if loop.time() > deadline:
            raise TimeoutError(f"could not read {tp.topic} from {start} to {end}")
        batch = await consumer.getmany(tp, timeout_ms=200)
        out.extend(r for r in batch.get(tp, []) if start <= r.offset < end)
    return out


async def assemble_snapshot(
    consumer: AIOKafkaConsumer, tp: TopicPartition, manifest: Manifest
) -> LoadedSnapshot:
    """The snapshot a manifest names, checked; raises SnapshotError saying what is wrong."""
    if not manifest.chunk_offsets:
        raise SnapshotError("manifest names no chunks")
    records = await _read_range(
        consumer, tp, min(manifest.chunk_offsets), max(manifest.chunk_offsets) + 1
    )
    by_offset = {record.offset: record for record in records}
    pieces = []
    for index, offset in enumerate(manifest.chunk_offsets):
        record = by_offset.get(offset)
        if record is None or record.value is None:
            raise SnapshotError(f"chunk {index} at offset {offset} is gone (compacted or lost)")
        if record.key != chunk_key(manifest.cluster, manifest.slot, index):
            raise SnapshotError(f"chunk {index} at offset {offset} has another key")
        pieces.append(record.value)
    try:
        body = zlib.decompress(b"".join(pieces))
    except zlib.error as exc:
        raise SnapshotError(f"chunks do not decompress: {exc}") from None
    if len(body) != manifest.size or digest(body) != manifest.sha256:
        raise SnapshotError("sha256 of the chunks does not match the manifest")
    with no_gc():
        state = decode_state(body)
    if state.seq != manifest.seq:
        raise SnapshotError(f"state is at seq {state.seq}, manifest says {manifest.seq}")
    return LoadedSnapshot(manifest, state, body)


async def newest_first(
    bootstrap: str, topic: str, cluster: str
) -> AsyncGenerator[LoadedSnapshot, None]:
    """The cluster's snapshots that check out, newest first; logs each one passed over.

    Reads the topic's tail backwards in growing windows, so finding the newest snapshot does
    not cost more when compaction has not yet removed older ones. Close it (aclosing) when
    done early.
    """
    consumer, tp = await snapshot_consumer(bootstrap, topic)
    try:
        begin = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        window = 16
        high = end
        while high > begin:
            low = max(begin, high - window)
            records = await _read_range(consumer, tp, low, high)
            for record in sorted(records, key=lambda r: r.offset, reverse=True):
                if manifest_cluster(record.key) != cluster or record.value is None:
                    continue
                try:
                    manifest = Manifest.from_bytes(record.value)
                    loaded = await assemble_snapshot(consumer, tp, manifest)
                except (SnapshotError, ValueError, KeyError, TypeError) as exc:
                    log.warning("snapshot at %s@%d passed over: %s", topic, record.offset, exc)
                    continue
                yield loaded
            high = low
            window *= 4
    finally:
        await consumer.stop()


async def read_journal_from(
    bootstrap: str, topic: str, offset: int, cluster_key: bytes
) -> list[JournalRecord]:
    """The cluster's committed journal records from `offset` to the end (one partition)."""
    consumer, tp = await snapshot_consumer(bootstrap, topic)
    try:
        end = (await consumer.end_offsets([tp]))[tp]
        records = await _read_range(consumer, tp, offset, end)
        return [
            decode_journal(r.value) for r in records if r.key == cluster_key and r.value is not None
        ]
    finally:
        await consumer.stop()
