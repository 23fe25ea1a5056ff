"""The scheduler's way back to the journal: rebuild, seek the inputs back, and the idle epoch check (I/O shell).

Split from streams/sequencer.py along the recovery seam. Whenever a transaction fails the
scheduler's state returns to what the journal says (streams/rebuild.py reads and folds it)
and its inputs to the committed offsets, so a batch is either wholly in the journal,
commands and offsets, or read again. See docs/scheduler.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from domain.plugins import Plugins
from domain.state import State
from streams.batch import SchedulerFenced, is_fatal
from streams.bounded import NEEDS_NEW_EPOCH, TransactionStalled, bounded_transaction
from streams.kafka_io import Topics
from streams.metrics import SchedulerMonitor
from streams.rebuild import load_state
from streams.snapshots import Manifest, SnapshotWriter
from streams.standby import WarmStart

__all__ = ["REBUILD_TIMEOUT_S", "Recovery"]

log = logging.getLogger("quotaflow.scheduler")

REBUILD_TIMEOUT_S = 60


class Recovery:
    """Rebuild and seek for the scheduler, which provides the clients and the state."""

    bootstrap: str
    cluster: str
    group_id: str
    topics: Topics
    plugins: Plugins
    clock: Callable[[], int]
    state: State
    committed_seq: int
    snapshots: SnapshotWriter
    load_snapshots: bool
    warm: WarmStart | None
    _partitions: list[TopicPartition]
    _needs_recovery: bool
    _deferred: dict[TopicPartition, OffsetAndMetadata]
    _producer: AIOKafkaProducer | None
    _last_commit_ms: int
    transaction_bound_s: float
    monitor: SchedulerMonitor | None

    if TYPE_CHECKING:  # provided by the scheduler and by BatchTransactions

        def _require_producer(self) -> AIOKafkaProducer: ...
        def _require_consumer(self) -> AIOKafkaConsumer: ...
        async def _restart_producer(self) -> None: ...

    async def rebuild(self) -> None:
        """State from the newest valid snapshot plus the journal after it, or the whole journal.

        The commands this emits were produced in the same transactions as the journal
        records, so they are discarded here.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REBUILD_TIMEOUT_S
        while True:
            state, manifest = await self._load()
            # Commit markers are written just after a commit returns; until they land the
            # last stable offset can stop short of our own last batch.
            if state.seq >= self.committed_seq:
                break
            if loop.time() > deadline:
                raise RuntimeError(
                    f"journal ends at seq {state.seq} but seq {self.committed_seq} was committed"
                )
            await asyncio.sleep(0.1)
        self.state = state
        self.committed_seq = state.seq
        self.snapshots.loaded(manifest, self.clock())

    async def _load(self) -> tuple[State, Manifest | None]:
        warm, self.warm = self.warm, None
        return await load_state(
            self.bootstrap, self.topics, self.cluster, self.plugins, self.load_snapshots, warm=warm
        )

    async def _seek_committed(self) -> None:
        """Every input partition back to its committed offset. aiokafka retries the offset
        fetch for as long as the group coordinator answers with a retriable error, so each
        is bounded like a transaction (streams/bounded.py); past the bound the step fails
        and the next one recovers again."""
        consumer = self._require_consumer()
        self._deferred.clear()  # read again from the committed offsets
        for tp in self._partitions:
            offset = await asyncio.wait_for(consumer.committed(tp), self.transaction_bound_s)
            if offset is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, offset)

    async def _recover(self, seek: bool) -> None:
        """After an aborted transaction: state back to the journal, inputs back to the offsets,
        and a producer again if the last one could not be replaced."""
        if self._producer is None:
            await self._restart_producer()
        await self.rebuild()
        if seek:
            await self._seek_committed()

    async def _gave_up(self, exc: Exception) -> None:
        """A transaction Kafka failed or never finished: counted for operators, and a new
        producer epoch where the old producer cannot go on (`NEEDS_NEW_EPOCH`)."""
        if self.monitor is not None:
            stalled = isinstance(exc, TransactionStalled)
            self.monitor.recovering("stalled" if stalled else "kafka_error")
        if isinstance(exc, NEEDS_NEW_EPOCH):
            await self._restart_producer()

    async def _confirm_epoch(self) -> None:
        """An idle scheduler journals nothing, so it would not learn that a newer instance took
        over. A transaction that only commits the consumer's offsets again (no journal record)
        meets the newer epoch, so a fenced scheduler stops within tick_ms even when idle."""
        producer, consumer = self._require_producer(), self._require_consumer()
        offsets = {}
        for tp in self._partitions:
            # At once while the consumer holds a position; without one aiokafka waits for an
            # offset fetch it retries for as long as Kafka answers retriable errors. Bounded
            # like a transaction: past the bound the step fails and the next one recovers.
            position = await asyncio.wait_for(consumer.position(tp), self.transaction_bound_s)
            offsets[tp] = OffsetAndMetadata(position, "")
        try:
            async with bounded_transaction(producer, self.transaction_bound_s):
                await producer.send_offsets_to_transaction(offsets, self.group_id)
            self._deferred.clear()  # the positions cover every deferred offset
        except ProducerFenced as exc:
            raise SchedulerFenced(str(exc)) from exc
        except Exception as exc:
            if is_fatal(producer):
                raise SchedulerFenced(repr(exc)) from exc
            log.warning("idle epoch check failed (%r); recovering from the journal", exc)
            await self._gave_up(exc)
            self._needs_recovery = True
        self._last_commit_ms = self.clock()
