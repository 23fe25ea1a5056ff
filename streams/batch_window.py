"""The scheduler's batch window: under load, inputs gather until a transaction is worth its cost (I/O shell).

A transaction's own requests (AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn) cost the scheduler 2-3 ms of CPU however many inputs it carries. While the last
transaction that wrote began less than `window_ms` ago, a batch keeps fetching until the
window has passed (or it holds `max_batch` inputs), so the inputs of that time share one
transaction; after a quiet spell a batch goes at once. docs/kafka.md, "Batch window".
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

__all__ = ["BatchWindow"]

Batch = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]


class BatchWindow:
    """When the last transaction that wrote began, and how long a batch may gather after it."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._wrote_at = -float("inf")  # monotonic seconds

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def wrote(self, began: float) -> None:
        """A batch that began at `began` (from `now()`) wrote to the broker."""
        self._wrote_at = began

    async def gather(self, consumer: AIOKafkaConsumer, batch: Batch, max_batch: int) -> None:
        """Adds to `batch`, in place, what arrives until the window has passed."""
        count = sum(len(records) for records in batch.values())
        while count < max_batch:
            left_ms = (self._wrote_at + self.window_ms / 1000 - time.monotonic()) * 1000
            if left_ms < 1:
                return
            more = await consumer.getmany(timeout_ms=int(left_ms), max_records=max_batch - count)
            for tp, records in more.items():
                batch.setdefault(tp, []).extend(records)
                count += len(records)
