"""The scheduler's batch window: under load, inputs gather until a transaction is worth its cost (I/O shell).

A transaction's own requests (AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn) cost the scheduler 2-3 ms of CPU however many inputs it carries. While the last
transaction that wrote began less than `window_ms` ago, a batch keeps fetching until the
window has passed (or it holds `max_batch` inputs), so the inputs of that time share one
transaction; after a quiet spell a batch goes at once. docs/kafka.md, "Batch window".

The wait for a batch's first input (up to `tick_ms`, 60 s at most) is cut into slices of
STOP_SLICE_MS, so a scheduler asked to stop (SIGTERM) stops within one slice rather than at
the end of the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

__all__ = ["STOP_SLICE_MS", "BatchWindow"]

Batch = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]

# The longest a wait for input goes without looking whether the scheduler is asked to stop.
# A slice costs one `getmany` on records already fetched (no request to the broker).
STOP_SLICE_MS = 200


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

    @staticmethod
    async def first(
        consumer: AIOKafkaConsumer, wait_ms: int, max_batch: int, stopping: Callable[[], bool]
    ) -> Batch:
        """A batch's first records: waits up to `wait_ms` for them, or until `stopping()`."""
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            batch: Batch = await consumer.getmany(
                timeout_ms=min(left_ms, STOP_SLICE_MS), max_records=max_batch
            )
            if batch or left_ms <= STOP_SLICE_MS or stopping():
                return batch

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
