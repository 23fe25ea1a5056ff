"""What the replay audit reads besides the journal, lazily: commands and snapshots (I/O shell).

The audit (domain/audit.py) is synchronous and runs in a worker thread; it pulls from the
iterators here, which fetch through the caller's event loop (`run_coroutine_threadsafe`),
where one consumer per topic lives. Nothing is read ahead of what the audit asks for beyond
a page per partition, so memory does not grow with the topics' length:

- `CommandPages`: each partition of the commands topic (keyed by node, so in order per
  node) read a page at a time, up to the ends fixed when it starts; the partitions merged
  by `seq`, which is the journal order the audit folds in.
- `SnapshotPages`: the manifests only, found by streaming the snapshots topic; each
  snapshot's chunks are fetched and assembled when the audit reaches its seq, then dropped.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Coroutine, Iterator
from typing import Any, TypeAlias, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from domain.audit import SnapshotInput, command_seq
from domain.codec import decode_command
from domain.snapshot import SnapshotError
from streams.journal_reader import stream_to_end
from streams.kafka_io import partitions_of, read_committed_consumer
from streams.snapshot_reader import assemble_snapshot, snapshot_consumer
from streams.snapshots import Manifest, manifest_cluster

__all__ = ["CommandPages", "SnapshotPages", "read_snapshots"]

COMMAND_PAGE = 2_000  # commands fetched per partition at a time
MANIFEST_PAGE = 16  # snapshot records per page while looking for manifests (chunks are 512 KB)

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"
T = TypeVar("T")


def _call(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine on the reading loop from the audit's thread and waits for it."""
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


class CommandPages:
    """The commands topic up to its ends at `start`, a page per partition at a time."""

    def __init__(self, bootstrap: str, topic: str, timeout_s: float = 60) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout_s = timeout_s
        self.consumer: AIOKafkaConsumer | None = None
        self.ends: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        consumer = read_committed_consumer(self.bootstrap)
        await consumer.start()
        self.consumer = consumer
        partitions = await partitions_of(self.bootstrap, [self.topic])
        self.ends = dict(await consumer.end_offsets(partitions))
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)

    async def stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    async def page(self, tp: TopicPartition) -> list[Record]:
        """The partition's next committed records below its end; [] once it is read."""
        consumer = self.consumer
        assert consumer is not None, "start() first"
        end = self.ends.get(tp, 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while await consumer.position(tp) < end:
            if loop.time() > deadline:
                raise TimeoutError(
                    f"could not read {tp} to {end}: stuck at {await consumer.position(tp)}"
                )
            batch = await consumer.getmany(tp, timeout_ms=200, max_records=COMMAND_PAGE)
            page = [record for record in batch.get(tp, []) if record.offset < end]
            if page:
                return page
        return []

    def commands(self, loop: asyncio.AbstractEventLoop) -> Iterator[dict[str, Any]]:
        """Every command, partitions merged by seq (each partition's own order kept)."""
        parts = [self._partition(tp, loop) for tp in sorted(self.ends) if self.ends[tp] > 0]
        return heapq.merge(*parts, key=command_seq)

    def _partition(
        self, tp: TopicPartition, loop: asyncio.AbstractEventLoop
    ) -> Iterator[dict[str, Any]]:
        while page := _call(loop, self.page(tp)):
            for record in page:
                if record.value is not None:
                    yield decode_command(record.value)


class SnapshotPages:
    """The snapshots on the topic now (only `cluster`'s when given), assembled one at a time."""

    def __init__(self, bootstrap: str, topic: str, cluster: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.cluster = cluster
        self.consumer: AIOKafkaConsumer | None = None
        self.tp: TopicPartition | None = None
        # (seq, manifest or None, problem, newest of its key): manifests are small.
        self.found: list[tuple[int, Manifest | None, str, bool]] = []

    async def start(self) -> None:
        self.consumer, self.tp = await snapshot_consumer(self.bootstrap, self.topic)
        manifests: list[Record] = []
        async for page in stream_to_end(self.bootstrap, self.topic, page_records=MANIFEST_PAGE):
            for record in page:
                owner = manifest_cluster(record.key)
                if owner is None or record.value is None:
                    continue
                if self.cluster is None or owner == self.cluster:
                    manifests.append(record)
        newest = {record.key: record.offset for record in manifests}
        for record in manifests:
            assert record.value is not None
            try:
                manifest = Manifest.from_bytes(record.value)
            except (ValueError, KeyError, TypeError) as exc:
                problem = f"manifest at offset {record.offset} unreadable: {exc}"
                self.found.append((-1, None, problem, True))
                continue
            self.found.append((manifest.seq, manifest, "", newest[record.key] == record.offset))
        self.found.sort(key=lambda item: item[0])  # stable: offset order within a seq

    async def stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    async def load(self, found: tuple[int, Manifest | None, str, bool]) -> SnapshotInput | None:
        """One found snapshot as (seq, canonical bytes or None, problem); None for one whose
        chunks are gone because a newer snapshot took its slot (compaction may remove them)."""
        assert self.consumer is not None and self.tp is not None, "start() first"
        seq, manifest, problem, newest = found
        if manifest is None:
            return (seq, None, problem)
        try:
            return (seq, (await assemble_snapshot(self.consumer, self.tp, manifest)).body, "")
        except SnapshotError as exc:
            return (seq, None, str(exc)) if newest else None

    def snapshots(self, loop: asyncio.AbstractEventLoop) -> Iterator[SnapshotInput]:
        """(seq, canonical bytes or None, problem) in seq order, each fetched when asked for."""
        for found in self.found:
            loaded = _call(loop, self.load(found))
            if loaded is not None:
                yield loaded


async def read_snapshots(
    bootstrap: str, topic: str, cluster: str | None = None
) -> list[SnapshotInput]:
    """Every snapshot still in the topic, loaded at once, in seq order (for tests and tools;
    the replay audit pulls them one at a time)."""
    pages = SnapshotPages(bootstrap, topic, cluster)
    try:
        await pages.start()
        return [loaded for found in pages.found if (loaded := await pages.load(found))]
    finally:
        await pages.stop()
