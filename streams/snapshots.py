"""Scheduler snapshots on the compacted quotaflow.snapshots topic: write, find, load (I/O shell).

This module writes them; `streams.snapshot_reader` finds and loads them.

A snapshot is `domain.snapshot.encode_state` of the state after a batch's cycle, compressed
(zlib) and cut into chunks that fit Kafka's message limit, followed by one manifest record
naming the journal `seq` and offset it covers, the chunks' offsets and a sha256 of the
canonical bytes. The scheduler sends all of it inside the transaction of that batch, so a
snapshot exists exactly when the journal records it covers committed.

Keys alternate between two slots per cluster (`{cluster}/snapshot/{slot}/chunk/{i}` and
`.../manifest`), so compaction keeps the newest snapshot and the one before it intact; chunk
keys a slot no longer uses are tombstoned. Loading looks at the topic's tail for the newest
manifest and falls back to older ones, then to the whole journal, logging why.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson
from aiokafka import AIOKafkaProducer

from domain.snapshot import digest, encode_state
from domain.state import State

__all__ = [
    "CHUNK_BYTES",
    "SNAPSHOT_RECORDS",
    "SNAPSHOT_SECONDS",
    "Encoded",
    "Manifest",
    "SnapshotWriter",
]

log = logging.getLogger("quotaflow.snapshots")

SNAPSHOT_RECORDS = 2_000  # journal records between snapshots
SNAPSHOT_SECONDS = 300.0  # or this long, if any record was journaled meanwhile
# A snapshot that costs more than COSTLY_S of CPU waits, past SNAPSHOT_RECORDS, until the
# scheduler has spent WORK_PER_COST times that much on batches: snapshots then take at most
# about 1/WORK_PER_COST of the scheduler's CPU, and the journal tail a restart folds costs
# about WORK_PER_COST snapshots' time (docs/scheduler.md, Cadence).
COSTLY_S = 0.010
WORK_PER_COST = 10
CHUNK_BYTES = 512 * 1024  # well under Kafka's default 1 MiB message limit
READ_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one snapshot covers and where its chunks are; written after its chunks."""

    cluster: str
    slot: int
    seq: int
    ts: int
    journal_offset: int  # offset of the journal record with `seq`: the tail starts after it
    size: int  # canonical bytes, before compression
    sha256: str  # of the canonical bytes
    chunk_offsets: tuple[int, ...]
    slot_chunks: tuple[int, int]  # chunks each slot holds once this commits (for tombstones)

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "type": "SnapshotManifest",
                "cluster": self.cluster,
                "slot": self.slot,
                "seq": self.seq,
                "ts": self.ts,
                "journal_offset": self.journal_offset,
                "size": self.size,
                "sha256": self.sha256,
                "encoding": "zlib",
                "chunk_offsets": list(self.chunk_offsets),
                "slot_chunks": list(self.slot_chunks),
            }
        )

    @staticmethod
    def from_bytes(raw: bytes) -> Manifest:
        data = orjson.loads(raw)
        if data.get("type") != "SnapshotManifest" or data.get("encoding") != "zlib":
            raise ValueError("not a zlib snapshot manifest")
        first, second = (int(count) for count in data["slot_chunks"])
        return Manifest(
            cluster=str(data["cluster"]),
            slot=int(data["slot"]),
            seq=int(data["seq"]),
            ts=int(data["ts"]),
            journal_offset=int(data["journal_offset"]),
            size=int(data["size"]),
            sha256=str(data["sha256"]),
            chunk_offsets=tuple(int(offset) for offset in data["chunk_offsets"]),
            slot_chunks=(first, second),
        )


@dataclass(frozen=True)
class Encoded:
    """A state encoded for a snapshot: what its manifest names, and the compressed bytes."""

    seq: int
    ts: int
    size: int  # of the canonical bytes
    sha256: str
    packed: bytes


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Encoding or decoding a state allocates millions of objects and frees none: the cyclic
    collector would walk the whole heap again and again for nothing (half the time here)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def chunk_key(cluster: str, slot: int, index: int) -> bytes:
    return f"{cluster}/snapshot/{slot}/chunk/{index:05d}".encode()


def manifest_key(cluster: str, slot: int) -> bytes:
    return f"{cluster}/snapshot/{slot}/manifest".encode()


def manifest_cluster(key: bytes | None) -> str | None:
    text = (key or b"").decode("utf-8", "replace")
    head, sep, tail = text.rpartition("/snapshot/")
    return head if sep and tail.endswith("/manifest") else None


class SnapshotWriter:
    """Decides when a snapshot is due and sends one inside the caller's open transaction
    (the scheduler opens one for it right after the batch that made it due)."""

    def __init__(
        self,
        topic: str,
        cluster: str,
        every_records: int = SNAPSHOT_RECORDS,
        every_seconds: float = SNAPSHOT_SECONDS,
        clock: Callable[[], int] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.topic = topic
        self.cluster = cluster
        self.every_records = every_records
        self.every_ms = int(every_seconds * 1000)
        self.chunk_bytes = chunk_bytes
        self.last: Manifest | None = None  # the newest committed snapshot
        self.last_at = clock() if clock is not None else 0
        self._sent: Manifest | None = None  # sent in the open transaction, not yet committed
        self.cost_s = 0.0  # CPU seconds the last snapshot took to encode
        self.work_s = 0.0  # CPU seconds of committed batches since the last snapshot
        # After a snapshot Kafka refused: none due before this seq, nor before this time.
        self._retry_seq, self._retry_at = 0, 0

    @property
    def enabled(self) -> bool:
        return self.every_records > 0

    def loaded(self, manifest: Manifest | None, now: int) -> None:
        """The state was rebuilt from `manifest` (or the whole journal when None)."""
        self.last, self._sent, self.last_at = manifest, None, now

    def due(self, seq: int, now: int) -> bool:
        if not self.enabled:
            return False
        covered = self.last.seq if self.last is not None else 0
        if seq <= covered or (seq < self._retry_seq and now < self._retry_at):
            return False  # nothing new, or a refused one is retried a cadence later
        if now - self.last_at >= self.every_ms:
            return True
        if seq - covered < self.every_records:
            return False
        return self.cost_s < COSTLY_S or self.work_s >= WORK_PER_COST * self.cost_s

    def worked(self, cpu_s: float) -> None:
        """A batch took this much CPU (counted towards the next costly snapshot)."""
        self.work_s += cpu_s

    def encode(self, state: State) -> Encoded | None:
        """The state's canonical bytes, compressed: CPU only, so done before the snapshot's
        transaction begins (12.6 s for 10,000 nodes and 100,000 pending jobs, 195 MB, which
        must not count against the transaction's deadline). None if it did not encode."""
        started = time.process_time()
        try:
            with no_gc():
                body = encode_state(state)  # the state after this batch's cycle
        except Exception:
            # A bug, not the batch's fault: the batch has committed already, and no input
            # waits for the snapshot.
            log.exception("snapshot at seq %d not written: the state did not encode", state.seq)
            return None
        packed = zlib.compress(body, 1)
        self.cost_s = time.process_time() - started
        return Encoded(state.seq, state.ts, len(body), digest(body), packed)

    async def write(
        self, producer: AIOKafkaProducer, encoded: Encoded, journal_offset: int
    ) -> Manifest:
        """Sends the encoded state's chunks, tombstones and manifest; the caller's commit makes
        them real."""
        packed = encoded.packed
        pieces = [
            packed[start : start + self.chunk_bytes]
            for start in range(0, len(packed), self.chunk_bytes)
        ] or [b""]
        # Alternate slots: the other slot keeps the previous snapshot whole whatever happens.
        slot = 0 if self.last is None else 1 - self.last.slot
        before = self.last.slot_chunks if self.last is not None else (0, 0)
        offsets = []
        for index, piece in enumerate(pieces):
            sent = await producer.send(self.topic, piece, key=chunk_key(self.cluster, slot, index))
            offsets.append((await sent).offset)
        for index in range(len(pieces), before[slot]):
            await producer.send(self.topic, None, key=chunk_key(self.cluster, slot, index))
        counts = (len(pieces), before[1]) if slot == 0 else (before[0], len(pieces))
        manifest = Manifest(
            cluster=self.cluster,
            slot=slot,
            seq=encoded.seq,
            ts=encoded.ts,
            journal_offset=journal_offset,
            size=encoded.size,
            sha256=encoded.sha256,
            chunk_offsets=tuple(offsets),
            slot_chunks=counts,
        )
        await producer.send(self.topic, manifest.to_bytes(), key=manifest_key(self.cluster, slot))
        self._sent = manifest
        log.debug(
            "snapshot at seq %d: %d bytes, %d chunks (slot %d)",
            encoded.seq,
            encoded.size,
            len(pieces),
            slot,
        )
        return manifest

    def committed(self, now: int) -> None:
        """The transaction that carried the last `write` committed."""
        if self._sent is not None:
            self.last, self._sent, self.last_at = self._sent, None, now
            self.work_s = 0.0

    def failed(self, seq: int, now: int) -> None:
        """Kafka refused the snapshot at `seq`, or the state did not encode: the next is due
        a cadence later (records or seconds), so a topic that refuses every snapshot, or a
        state that does not encode, costs one try per cadence, not one per batch."""
        self._sent = None
        self._retry_seq = seq + max(1, self.every_records)
        self._retry_at = now + self.every_ms
