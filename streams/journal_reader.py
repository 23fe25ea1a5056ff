"""Streams a topic's committed records from the start to a fixed end, page by page (I/O shell).

Replay, `explain --at` and the projections fold the journal as it streams past, so their
memory is bounded by the state they fold, not by the journal's length: at most a few pages
of records are held at once. A synchronous iterator (`iter_journal`) reads Kafka in a
thread of its own, so pure, synchronous folds (domain/audit.py, projections/view.py) can
consume it directly.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncGenerator, Iterator
from typing import TypeAlias

from aiokafka import ConsumerRecord, TopicPartition

from domain.codec import decode_journal
from domain.events import JournalRecord
from streams.kafka_io import partitions_of, read_committed_consumer

__all__ = ["end_offsets", "iter_journal", "stream_to_end"]

PAGE_RECORDS = 5_000  # records per page: a few MB at most, however long the journal
QUEUED_PAGES = 4  # pages read ahead of the fold

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"


async def end_offsets(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    """The topic's last stable offsets now (read_committed): where a read of it stops."""
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, [topic])
        return dict(await consumer.end_offsets(partitions))
    finally:
        await consumer.stop()


async def stream_to_end(
    bootstrap: str,
    topic: str,
    ends: dict[TopicPartition, int] | None = None,
    *,
    page_records: int = PAGE_RECORDS,
    timeout_s: float = 60,
) -> AsyncGenerator[list[Record], None]:
    """Pages of the topic's committed records, partition by partition in offset order, up to
    `ends` (default: the ends when reading starts). A read that stalls for `timeout_s` fails."""
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, [topic])
        if ends is None:
            ends = dict(await consumer.end_offsets(partitions))
        loop = asyncio.get_running_loop()
        for tp in partitions:
            end = ends.get(tp, 0)
            if end <= 0:
                continue
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = loop.time() + timeout_s
            while await consumer.position(tp) < end:
                if loop.time() > deadline:
                    position = await consumer.position(tp)
                    raise TimeoutError(f"could not read {tp} to {end}: stuck at {position}")
                batch = await consumer.getmany(tp, timeout_ms=200, max_records=page_records)
                page = [r for r in batch.get(tp, []) if r.offset < end]
                if page:
                    deadline = loop.time() + timeout_s
                    yield page
    finally:
        await consumer.stop()


def iter_journal(
    bootstrap: str,
    topic: str,
    cluster: str | None = None,
    ends: dict[TopicPartition, int] | None = None,
) -> Iterator[JournalRecord]:
    """The journal's records (only `cluster`'s, by key, when given), decoded one at a time."""
    wanted = None if cluster is None else cluster.encode()
    for page in iter_pages(bootstrap, topic, ends):
        for raw in page:
            if raw.value is not None and (wanted is None or raw.key == wanted):
                yield decode_journal(raw.value)


_DONE = object()


def iter_pages(
    bootstrap: str, topic: str, ends: dict[TopicPartition, int] | None = None
) -> Iterator[list[Record]]:
    """`stream_to_end` as a synchronous iterator: a reader thread with its own event loop
    fills a small queue (QUEUED_PAGES), so memory stays bounded however slow the consumer."""
    pages: queue.Queue[object] = queue.Queue(maxsize=QUEUED_PAGES)
    stop = threading.Event()
    failure: list[BaseException] = []

    async def read() -> None:
        stream = stream_to_end(bootstrap, topic, ends)
        async for page in stream:
            while not stop.is_set():
                try:
                    pages.put(page, timeout=0.1)
                    break
                except queue.Full:
                    await asyncio.sleep(0)
            if stop.is_set():
                await stream.aclose()
                return

    def run() -> None:
        try:
            asyncio.run(read())
        except BaseException as exc:  # handed to the reading thread
            failure.append(exc)
        finally:
            while True:
                try:
                    pages.put(_DONE, timeout=0.1)
                    break
                except queue.Full:
                    if stop.is_set():
                        break

    thread = threading.Thread(target=run, name=f"read {topic}", daemon=True)
    thread.start()
    try:
        while True:
            item = pages.get()
            if item is _DONE:
                break
            assert isinstance(item, list)
            yield item
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]
