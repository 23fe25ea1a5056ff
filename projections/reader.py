"""The journal reader: one read_committed aiokafka consumer in no group, from the checkpoint's offsets into the projector (I/O shell).

The consumer is assigned every partition of quotaflow.journal and quotaflow.commands and
positioned at the offsets stored in the checkpoint (offset 0 without one); nothing is
committed to Kafka. Records go one at a time through the `Projector`, which never leaves a
half-applied view. The reader also notices a checkpoint the topics do not continue (an
offset beyond a partition's end, or a first journal record that is not the next seq) and
rebuilds from offset 0, and closes the open group once every committed journal record has
been read. It runs as a service of the faust App (projections/app.py); docs/projections.md
says why the journal is not read by faust agents.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from domain.codec import decode_journal
from projections.process import Process

log = logging.getLogger(__name__)


class Reader:
    """Reads both topics into the process's projector, one batch per `read`."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.settings = process.settings
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: list[TopicPartition] = []

    async def start(self) -> None:
        """Connects, finds every partition of both topics and positions each at its offset."""
        consumer = self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            **self.settings.kafka_options,
            group_id=None,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        self.partitions = await self._partitions()
        consumer.assign(self.partitions)
        await self._position()
        self.process.lag_probe = self.lag
        self.process.positioned.set()

    async def stop(self) -> None:
        self.process.lag_probe = None
        if self.consumer is not None:
            await self.consumer.stop()

    async def _partitions(self) -> list[TopicPartition]:
        topics = self.process.topics
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.settings.bootstrap, **self.settings.kafka_options
        )
        await admin.start()
        try:
            while True:
                described = await admin.describe_topics(list(topics))
                found = {
                    entry["topic"]: [p["partition"] for p in entry["partitions"]]
                    for entry in described
                    if entry["error_code"] == 0 and entry["partitions"]
                }
                missing = [topic for topic in topics if topic not in found]
                if not missing:
                    return sorted(TopicPartition(t, p) for t in topics for p in found[t])
                if loop.time() > deadline:
                    raise RuntimeError(f"topics not found on the broker: {', '.join(missing)}")
                await asyncio.sleep(0.5)
        finally:
            await admin.close()

    async def _position(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        ends = await consumer.end_offsets(self.partitions)
        offsets = self.process.view.offsets
        beyond = [
            f"{tp.topic}:{tp.partition}"
            for tp in self.partitions
            if offsets.get(f"{tp.topic}:{tp.partition}", 0) > ends[tp]
        ]
        if beyond:
            self.process.rebuild(f"checkpoint offsets beyond the end of {', '.join(beyond)}")
            offsets = self.process.view.offsets
        for tp in self.partitions:
            consumer.seek(tp, offsets.get(f"{tp.topic}:{tp.partition}", 0))

    async def read(self) -> None:
        """Applies one batch (up to 500 records, waiting at most 0.5 s for them)."""
        consumer = self.consumer
        assert consumer is not None
        process = self.process
        batch = await consumer.getmany(timeout_ms=500, max_records=500)
        if batch:
            process.last_record_s = time.time()
        # No await from here to the end of the batch: the web server and the checkpoint
        # timer see the view between two records only.
        for tp in sorted(batch):
            where = f"{tp.topic}:{tp.partition}"
            for record in batch[tp]:
                if tp.topic == self.settings.journal:
                    if process.expect_seq is not None and not self._continues(record.value):
                        await self._position()  # the view was dropped: read again from 0
                        return
                    process.projector.journal(where, record.offset, record.value)
                else:
                    process.projector.command(where, record.offset, record.value)
        if process.projector.view.state.group_open and await self._journal_at_end():
            process.projector.settle()

    async def _journal_at_end(self) -> bool:
        """Whether every committed journal record has been read (position at the last stable
        offset): then the last batch read is whole."""
        consumer = self.consumer
        assert consumer is not None
        for tp in self.partitions:
            if tp.topic != self.settings.journal:
                continue
            stable = consumer.last_stable_offset(tp)
            if stable is None or await consumer.position(tp) < stable:
                return False
        return True

    def _continues(self, value: bytes) -> bool:
        """Whether the first journal record after a resume is the one the checkpoint expects."""
        process = self.process
        expected, process.expect_seq = process.expect_seq, None
        try:
            seq = decode_journal(value).seq
        except Exception:
            return True  # the projector reports it; it says nothing about the checkpoint
        if seq == expected:
            return True
        process.rebuild(f"the journal goes on at seq {seq}, the checkpoint expects {expected}")
        return False

    async def lag(self) -> int | None:
        """Records on the journal and commands topics not yet read: high water minus position."""
        consumer = self.consumer
        if consumer is None:
            return None
        lag = 0
        try:
            for tp in self.partitions:
                high = consumer.highwater(tp)
                if high is None:
                    return None  # nothing fetched yet: unknown, not zero
                lag += max(0, high - await consumer.position(tp))
        except Exception:
            return None
        return lag
