"""What one transaction writes to a topic, appended to Kafka record batches and submitted together (I/O shell).

`AIOKafkaProducer.send` costs a metadata check, a partitioner call, a future and an
accumulator lookup per record; the scheduler writes every journal record and command of a
batch at once, so it fills aiokafka's record batches itself (`create_batch`/`send_batch`)
and submits each full or finished batch with one future. Records go to the partition
`send` would choose (the default partitioner on the key), in the order appended, and the
offset of the last record is known once its batch is acknowledged (for the snapshot's
manifest). Measured in docs/kafka.md (Scheduler settings).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from streams.batch import Pending

__all__ = ["Outbox"]

Headers = Sequence[tuple[str, bytes]]
_PARTITIONER = DefaultPartitioner()


class Outbox:
    """One topic's records of the open transaction, batched per partition."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, pending: Pending) -> None:
        self._producer = producer
        self._topic = topic
        self._pending = pending
        self._partitions: list[int] | None = None
        self._by_key: dict[bytes, int] = {}
        self._open: dict[int, Any] = {}  # partition -> its BatchBuilder being filled
        # The last record appended: its partition, and its index in that partition's batch.
        self._last: tuple[int, int] | None = None
        self._last_sent: asyncio.Future[Any] | None = None  # the batch that holds it, once sent
        self.count = 0

    async def append(self, value: bytes, key: bytes, headers: Headers = ()) -> None:
        partition = await self._partition(key)
        builder = self._open.get(partition)
        if builder is None:
            builder = self._open[partition] = self._producer.create_batch()
        metadata = builder.append(timestamp=None, key=key, value=value, headers=list(headers))
        if metadata is None:  # full: send it and start the next (a first record always fits)
            await self._send(partition)
            builder = self._open[partition] = self._producer.create_batch()
            metadata = builder.append(timestamp=None, key=key, value=value, headers=list(headers))
        self._last = (partition, builder.record_count() - 1)
        self._last_sent = None
        self.count += 1

    async def flush(self) -> None:
        """Submits every open batch (their futures join the transaction's pending sends)."""
        for partition in sorted(self._open):
            await self._send(partition)

    async def last_offset(self) -> int | None:
        """The offset of the last record appended, once Kafka has acknowledged it."""
        if self._last is None:
            return None
        await self.flush()
        assert self._last_sent is not None
        metadata = await self._last_sent
        return int(metadata.offset) + self._last[1]

    async def _send(self, partition: int) -> None:
        builder = self._open.pop(partition, None)
        if builder is None or builder.record_count() == 0:
            return
        future = await self._producer.send_batch(builder, self._topic, partition=partition)
        self._pending.add(future)
        if self._last is not None and self._last[0] == partition and self._last_sent is None:
            self._last_sent = future

    async def _partition(self, key: bytes) -> int:
        found = self._by_key.get(key)
        if found is None:
            if self._partitions is None:
                # The same list AIOKafkaProducer.send hands the partitioner.
                self._partitions = list(await self._producer.partitions_for(self._topic))
            found = _PARTITIONER(key, self._partitions, self._partitions)
            self._by_key[key] = found
        return found
