"""The sequencer's batch transaction: journal, rejections, cycle, commands and offsets, all or nothing (I/O shell).

Split from streams/sequencer.py along the transaction seam. `BatchTransactions` is the
part of the scheduler that runs one Kafka transaction per batch of inputs and isolates an
input the core cannot apply or whose output Kafka refuses; the scheduler (streams/
sequencer.py) owns the lifecycle, the read loop and recovery. Journal records and commands
are written through `Outbox` (record batches filled here, one future per batch).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import ProducerFenced

from domain.codec import encode_journaled
from domain.decider import apply, close_group
from domain.events import Event, NodeHeartbeat, NodesAlive, Tick
from domain.limits import REASON_CHARS_MAX, clip
from domain.liveness import LivenessTracker
from domain.plugins import Plugins
from domain.state import State
from streams.batch import (
    SKIP,
    BatchOutcome,
    CoreFailure,
    CycleFailure,
    InputKey,
    Pending,
    SchedulerFenced,
    Unwritable,
    command_bytes_or_fail,
    is_fatal,
    key_of,
    where,
    where_key,
)
from streams.bounded import (
    TRANSACTION_BOUND_MS,
    bounded_transaction,
    stop_within,
)
from streams.ingress import admit
from streams.kafka_io import Topics, transactional_producer
from streams.metrics import SchedulerMonitor
from streams.outbox import Outbox
from streams.owed_snapshot import OwedSnapshots
from streams.quiet import QuietBatches
from streams.records import (
    RECORD_REFUSALS,
    describe,
    journal_bytes,
    rejection_bytes,
    source_headers,
)
from streams.snapshots import SnapshotWriter
from streams.topics import JOBS

__all__ = ["BatchTransactions"]

log = logging.getLogger("quotaflow.scheduler")
Record: TypeAlias = "ConsumerRecord[bytes, bytes]"


class BatchTransactions(QuietBatches, OwedSnapshots):
    """Sequencing inside transactions; the scheduler provides the state, clients and recovery."""

    bootstrap: str
    transactional_id: str
    group_id: str
    topics: Topics
    plugins: Plugins
    clock: Callable[[], int]
    state: State
    committed_seq: int
    liveness: LivenessTracker
    snapshots: SnapshotWriter
    monitor: SchedulerMonitor | None
    _key: bytes
    _producer: AIOKafkaProducer | None
    _team_topics: dict[str, tuple[str, str]]
    transaction_bound_s: float = TRANSACTION_BOUND_MS / 1000  # streams/bounded.py

    if TYPE_CHECKING:  # provided by the scheduler and by Recovery

        async def _recover(self, seek: bool) -> None: ...
        async def _gave_up(self, exc: Exception) -> None: ...
        def _require_producer(self) -> AIOKafkaProducer: ...

    async def _sequence(self, inputs: list[Record]) -> BatchOutcome:
        """Sequences a batch, isolating any input the core cannot apply."""
        poisoned: dict[InputKey, str] = {}
        queue: list[list[Record]] = [inputs]
        total = BatchOutcome()
        while queue:
            batch = queue.pop(0)
            try:
                outcome = self._note_quiet(batch, poisoned) or await self._transact(batch, poisoned)
            except CoreFailure as failure:
                log.exception("internal error applying %s; rejecting it", where_key(failure.key))
                poisoned[failure.key] = f"internal error: {clip(repr(failure.error))}"
                await self._recover(seek=False)
                queue.insert(0, batch)
                continue
            except CycleFailure as failure:
                await self._recover(seek=False)
                live = [r for r in batch if key_of(r) not in poisoned]
                unwritable = isinstance(failure, Unwritable)
                if len(live) > 1 or (unwritable and len(batch) > 1):
                    log.warning("%s; retrying the batch input by input", failure.reason)
                    queue[:0] = [[record] for record in batch]
                elif live:
                    log.error("%s: %s", where(live[0]), failure.reason, exc_info=not unwritable)
                    poisoned[key_of(live[0])] = failure.reason
                    queue.insert(0, batch)
                elif unwritable and poisoned.get(key_of(batch[0])) != SKIP:
                    # Not even its rejection could be written: let its offset pass alone,
                    # so the inputs behind it go on.
                    poisoned[key_of(batch[0])] = SKIP
                    queue.insert(0, batch)
                else:
                    # Unreachable while the core only cycles after an accepted input; if it
                    # ever happens, read the inputs again rather than drop them.
                    log.error("cycle failed with no input to blame: %r", failure.error)
                    await self._recover(seek=True)
                    break
                continue
            if outcome.aborted:
                break  # the consumer was sought back: these inputs will be read again
            total.journaled += outcome.journaled
            total.rejected += outcome.rejected
            total.heard += outcome.heard
            total.commands += outcome.commands
            total.ts, total.last_seq = outcome.ts, outcome.last_seq
        return total

    async def _tick(self) -> BatchOutcome | None:
        try:
            return await self._transact([], {}, tick=True)
        except (CoreFailure, CycleFailure) as failure:
            log.error("internal error on tick: %r; state rebuilt from the journal", failure)
            await self._recover(seek=False)
            return None

    async def _transact(
        self, inputs: Sequence[Record], poisoned: dict[InputKey, str], *, tick: bool = False
    ) -> BatchOutcome:
        """One transaction: journal records, rejections, commands and offsets, or none of them."""
        producer = self._require_producer()
        ts = self._batch_ts()
        outcome = BatchOutcome(ts=ts)
        pending = Pending()
        journal = Outbox(producer, self.topics.journal, pending)
        alive: list[NodesAlive] = []
        started, cpu_started = time.perf_counter(), time.process_time()
        cycle_s = 0.0
        owed, journal_offset = False, None
        try:
            async with bounded_transaction(producer, self.transaction_bound_s) as deadline:
                # Nodes heard since their last journaled heartbeat go first, when the core
                # would otherwise find one of them silent in this batch's cycle.
                alive = self.liveness.due(self.state, ts, self._core_due())
                for event in alive:
                    await self._journal(journal, event, ts)
                    outcome.journaled += 1
                for record in inputs:
                    await self._sequence_one(record, ts, poisoned, pending, journal, outcome)
                if tick and not alive:
                    await self._journal(journal, Tick(), ts)
                    outcome.journaled += 1
                cycle_started = time.perf_counter()
                cycled = self.state.group_open
                try:
                    self.state, commands = close_group(self.state, self.plugins)
                except Exception as exc:
                    raise CycleFailure(exc) from exc
                finally:
                    if cycled:
                        self._due = None  # the cycle may have set or cleared timers
                cycle_s = time.perf_counter() - cycle_started
                deadline.renew()  # the cycle's own time is not Kafka's
                await journal.flush()
                sent = Outbox(producer, self.topics.commands, pending)
                for command in commands:
                    await sent.append(command_bytes_or_fail(command), command.node.encode())
                await sent.flush()
                outcome.commands = len(commands)
                self.snapshots.worked(time.process_time() - cpu_started)
                owed = outcome.journaled > 0 and self.snapshots.due(self.state.seq, self.clock())
                wrote = outcome.wrote or tick
                offsets = self._offsets_to_commit(inputs, wrote)
                if offsets:
                    await producer.send_offsets_to_transaction(offsets, self.group_id)
                await asyncio.gather(*pending.futures)
                if owed:  # the snapshot follows the commit: `write_owed_snapshot`
                    journal_offset = await journal.last_offset()  # acknowledged: no wait
        except (CoreFailure, CycleFailure):
            raise
        except ProducerFenced as exc:
            raise SchedulerFenced(str(exc)) from exc
        except Exception as exc:
            # A fatal producer state means our epoch is gone: a newer instance owns the id.
            if is_fatal(producer):
                raise SchedulerFenced(repr(exc)) from exc
            if isinstance(exc, RECORD_REFUSALS):
                # Retrying these records can never succeed. A refused batch also leaves the
                # idempotent producer's sequence numbers ahead of the broker's, so a new
                # producer (a new epoch) takes over before the inputs are isolated one by one.
                await self._restart_producer()
                reason = f"Kafka refused to write what this input produced: {describe(exc)}"
                raise Unwritable(exc, reason) from exc
            # Anything else (broker unavailable, timeout): the transaction's outcome is in the
            # journal and the committed offsets, so read them back and carry on from there.
            log.warning("transaction failed (%r); rebuilding from the journal", exc)
            await self._gave_up(exc)
            await self._recover(seek=True)
            return BatchOutcome(ts=ts, last_seq=self.state.seq, aborted=True)
        self.committed_seq = self.state.seq
        if offsets or wrote:  # otherwise nothing reached the broker: the epoch is unconfirmed
            self._last_commit_ms = self.clock()
        if offsets:
            self._deferred.clear()
        self.liveness.committed(self.state, alive)
        if owed and journal_offset is not None:
            self._snapshot_owed = (self.state.seq, journal_offset)
        outcome.last_seq = self.state.seq
        if self.monitor is not None:
            self.monitor.committed(
                journaled=outcome.journaled,
                ticks=int(tick and not alive),
                rejections=outcome.rejections,
                commands=commands,
                cycle_s=cycle_s,
                transaction_s=time.perf_counter() - started,
                seq=self.state.seq,
                ts=self.state.ts,
            )
        log.debug(
            "batch ts %d: %d journaled (to seq %d), %d rejected, %d commands",
            ts,
            outcome.journaled,
            outcome.last_seq,
            outcome.rejected,
            outcome.commands,
        )
        return outcome

    async def _restart_producer(self) -> None:
        """A new producer with the same transactional id: a new epoch, which fences the old
        one and has the broker abort whatever transaction it left open. If Kafka cannot be
        reached now, the scheduler has no producer until its next recovery starts one."""
        old = self._producer
        self._producer = None
        if old is not None:
            await stop_within(old, self.transaction_bound_s)
        producer = transactional_producer(self.bootstrap, self.transactional_id)
        try:
            await producer.start()
        except BaseException:
            await stop_within(producer, self.transaction_bound_s)
            raise
        self._producer = producer

    async def _sequence_one(
        self,
        record: Record,
        ts: int,
        poisoned: dict[InputKey, str],
        pending: Pending,
        journal: Outbox,
        outcome: BatchOutcome,
    ) -> None:
        key = key_of(record)
        reason = poisoned.get(key)
        if reason == SKIP:
            log.error(
                "skipped %s: not even its rejection could be written (%d bytes, sha256 %s)",
                where(record),
                len(record.value or b""),
                hashlib.sha256(record.value or b"").hexdigest(),
            )
            return
        event: Event | None = None
        raw = b""
        kind = "isolated"  # the kinds of refusal, for metrics: docs/operations.md
        if reason is None:
            team = self._team_topics.get(record.topic)
            logical = JOBS if team else self.topics.logical(record.topic)
            admission = admit(self.state, record, logical, team, key)
            event, reason, kind = admission.event, admission.reason, admission.kind
        if (
            reason is None
            and isinstance(event, NodeHeartbeat)
            and self.liveness.absorb(self.state, event, ts)
        ):
            outcome.heard += 1
            return  # nothing the core sees changed but time: no journal record
        if reason is None and event is not None:
            # Checked before sending: a record Kafka would refuse must not fail the batch.
            raw, reason = journal_bytes(event, self.state.seq + 1, ts)
            kind = "unwritable"
        if reason is not None or event is None:
            await self._reject(record, ts, reason or "refused", pending)
            outcome.rejected += 1
            outcome.rejections.append(kind)
            return
        # The header names the input this record journals, so its producer can learn the
        # verdict; headers are not part of the record's bytes, so replay never sees them.
        await journal.append(raw, self._key, source_headers(record))
        self._apply(event, ts, key)
        outcome.journaled += 1

    async def _journal(self, journal: Outbox, event: Tick | NodesAlive, ts: int) -> None:
        await journal.append(encode_journaled(event, self.state.seq + 1, ts), self._key)
        self._apply(event, ts, None)

    def _apply(self, event: Event, ts: int, key: InputKey | None) -> None:
        try:
            apply(self.state, event, self.state.seq + 1, ts)
        except Exception as exc:
            if key is None:
                raise CycleFailure(exc) from exc
            raise CoreFailure(key, exc) from exc

    async def _reject(self, record: Record, ts: int, reason: str, pending: Pending) -> None:
        # Bounded, with where the input came from, its size and hash (streams/records.py).
        raw = rejection_bytes(record, ts, reason)
        log.info("rejected %s: %s", where(record), clip(reason, REASON_CHARS_MAX))
        pending.add(await self._require_producer().send(self.topics.rejected, raw))
