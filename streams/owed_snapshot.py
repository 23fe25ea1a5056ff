"""The snapshot a committed batch made due, written in a transaction of its own right after that batch (I/O shell).

Split from streams/transaction.py. See docs/scheduler.md, "Written right after its batch".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced

from domain.state import State
from streams.batch import SchedulerFenced, is_fatal
from streams.bounded import NEEDS_NEW_EPOCH, bounded_transaction
from streams.metrics import SchedulerMonitor
from streams.records import RECORD_REFUSALS, describe
from streams.snapshots import SnapshotWriter

__all__ = ["OwedSnapshots"]

log = logging.getLogger("quotaflow.scheduler")


class OwedSnapshots:
    """The owed snapshot's transaction (a mixin of the batch transactions)."""

    clock: Callable[[], int]
    state: State
    snapshots: SnapshotWriter
    monitor: SchedulerMonitor | None
    transaction_bound_s: float
    _snapshot_owed: tuple[int, int] | None = None  # (seq, journal offset) a commit made due

    if TYPE_CHECKING:  # provided by the scheduler and by BatchTransactions

        def _require_producer(self) -> AIOKafkaProducer: ...
        async def _restart_producer(self) -> None: ...

    async def write_owed_snapshot(self) -> None:
        """The snapshot a committed batch made due, in a transaction of its own right after
        it: the state is the one that batch committed (nothing was applied since), so the
        snapshot is never ahead of the journal, and the batch's commands reach the agents
        without waiting for its encoding. A snapshot Kafka refuses costs the snapshot only."""
        owed, self._snapshot_owed = self._snapshot_owed, None
        if owed is None or owed[0] != self.state.seq:
            return
        # Encoded before the transaction: its time is the core's, not a wait on Kafka.
        encoded = self.snapshots.encode(self.state)
        if encoded is None:  # the state did not encode (logged): tried a cadence later
            self.snapshots.failed(self.state.seq, self.clock())
            if self.monitor is not None:
                self.monitor.snapshots.labels("unencodable").inc()
            return
        producer = self._require_producer()
        try:
            async with bounded_transaction(producer, self.transaction_bound_s):
                await self.snapshots.write(producer, encoded, owed[1])
        except ProducerFenced as exc:
            raise SchedulerFenced(str(exc)) from exc
        except Exception as exc:
            if is_fatal(producer):
                raise SchedulerFenced(repr(exc)) from exc
            self.snapshots.failed(self.state.seq, self.clock())
            log.warning("snapshot at seq %d not written: %s", owed[0], describe(exc))
            if self.monitor is not None:
                self.monitor.snapshots.labels("refused").inc()
            if isinstance(exc, (*RECORD_REFUSALS, *NEEDS_NEW_EPOCH)):
                await self._restart_producer()  # as after a refused batch: a new epoch
            return
        self.snapshots.committed(self.clock())
        if self.monitor is not None:
            self.monitor.snapshots.labels("written").inc()
