"""The scheduler process: sequences ingress events into the journal and emits commands, exactly once (I/O shell).

One loop: read a batch from the three ingress topics; inside ONE Kafka transaction decode,
accept, number (`seq`) and stamp (`ts`) each input, append the accepted ones to the journal,
send the refused ones to quotaflow.rejected, run the group's scheduling cycle, send its
commands, and commit the consumer offsets. Everything the core decides lives in `domain/`;
this module only moves bytes and keeps the transaction boundaries. See docs/scheduler.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from domain.codec import DecodeError, decode_ingress, encode_journal
from domain.decider import accept, apply, close_group, initial_state
from domain.events import Event, JournalRecord, NodeHeartbeat, NodesAlive, Tick
from domain.limits import REASON_CHARS_MAX, clip
from domain.liveness import next_due_ts
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State
from domain.teams import team_refusal
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
    next_offsets,
    where,
    where_key,
)
from streams.kafka_io import (
    SCHEDULER_FETCH_WAIT_MS,
    Topics,
    TopicSettings,
    check_retention,
    ensure_topics,
    now_ms,
    partitions_of,
    read_committed_consumer,
    transactional_producer,
)
from streams.liveness import LivenessTracker
from streams.metrics import SchedulerMonitor
from streams.rebuild import load_state
from streams.records import (
    PRODUCER_STATE_ERRORS,
    RECORD_REFUSALS,
    describe,
    journal_bytes,
    rejection_bytes,
    source_headers,
)
from streams.snapshots import (
    SNAPSHOT_RECORDS,
    SNAPSHOT_SECONDS,
    Manifest,
    SnapshotWriter,
)
from streams.standby import WarmStart
from streams.status import observed
from streams.topics import JOBS

__all__ = ["Scheduler", "SchedulerFenced", "main", "run_scheduler"]

log = logging.getLogger("quotaflow.scheduler")

MAX_BATCH = 500  # inputs per transaction: bounds how much one abort throws away
REBUILD_TIMEOUT_S = 60


class Scheduler:
    """One cluster's sequencer: owns the journal's next seq and ts and the scheduler's state."""

    def __init__(
        self,
        bootstrap: str,
        cluster: str = "default",
        topic_prefix: str = "",
        *,
        plugins: Plugins = DEFAULT_PLUGINS,
        clock: Callable[[], int] = now_ms,
        max_batch: int = MAX_BATCH,
        create_topics: bool = True,
        topic_settings: TopicSettings | None = None,
        snapshot_records: int = SNAPSHOT_RECORDS,
        snapshot_seconds: float = SNAPSHOT_SECONDS,
        load_snapshots: bool = True,
        teams: Mapping[str, str] | None = None,
        warm: WarmStart | None = None,
        on_started: Callable[[], Awaitable[None]] | None = None,
        monitor: SchedulerMonitor | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.topics = Topics.for_prefix(topic_prefix)
        # The prefix namespaces the ids too, so isolated runs on one broker never fence each other.
        self.transactional_id = f"{topic_prefix}quotaflow-scheduler-{cluster}"
        self.group_id = f"{topic_prefix}quotaflow-scheduler-{cluster}"
        self.plugins = plugins
        self.clock = clock
        self.max_batch = max_batch
        self.create_topics = create_topics
        self.topic_settings = topic_settings or TopicSettings()
        self.state: State = initial_state()
        self.committed_seq = 0  # the last seq known committed: a rebuild must reach it
        self._key = cluster.encode()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._needs_recovery = False
        # Snapshots (snapshot_records 0: none written); load_snapshots False rebuilds from
        # the whole journal, for an operator who distrusts the snapshots.
        self.snapshots = SnapshotWriter(
            self.topics.snapshots, cluster, snapshot_records, snapshot_seconds, clock
        )
        self.load_snapshots = load_snapshots
        # Per-team job topics -> (team, the queue its jobs must stay at or below): domain/teams.py.
        self.teams = dict(sorted((teams or {}).items()))
        self._team_topics = {
            self.topics.team_jobs(team): (team, root) for team, root in self.teams.items()
        }
        # A standby's state, folded up to a journal offset, and what to do once started
        # (announce this instance as the active one): streams/leadership.py.
        self.warm = warm
        self.on_started = on_started
        self._last_journal: asyncio.Future[Any] | None = None  # the open batch's last record
        # Heartbeats heard but not journaled (they changed nothing but time); see
        # streams/liveness.py. Lost on a restart at no cost: agents keep heartbeating.
        self.liveness = LivenessTracker()
        self._last_commit_ms = 0  # clock of the last committed transaction
        self.monitor = monitor  # metrics and liveness (streams/metrics.py); None: not observed
        if monitor is not None:
            monitor.attach(self)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Takes over the transactional id (fencing any older instance), rebuilds, seeks."""
        if self.create_topics:
            await ensure_topics(self.bootstrap, self.topics, self.topic_settings, self.teams)
        # Refuse to run on a journal Kafka may delete: a restart would rebuild from a part.
        await check_retention(self.bootstrap, self.topics)
        # init_transactions first: it aborts a dead predecessor's open transaction and waits
        # for its commit markers, so the journal and offsets read next are final.
        self._producer = transactional_producer(self.bootstrap, self.transactional_id)
        await self._producer.start()
        self._consumer = read_committed_consumer(
            self.bootstrap, self.group_id, fetch_max_wait_ms=SCHEDULER_FETCH_WAIT_MS
        )
        await self._consumer.start()
        # Manual assignment: one scheduler per cluster, fenced by its transactional id, so a
        # group rebalance would only add pauses. The group id still stores the offsets.
        self._partitions = await partitions_of(
            self.bootstrap, [*self.topics.ingress, *self._team_topics]
        )
        self._consumer.assign(self._partitions)
        await self.rebuild()
        await self._seek_committed()
        log.info(
            "scheduler %s started: journal at seq %d ts %d, reading %s",
            self.cluster,
            self.state.seq,
            self.state.ts,
            ", ".join([*self.topics.ingress, *self._team_topics]),
        )
        if self.on_started is not None:
            await self.on_started()

    async def stop(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self._consumer = self._producer = None

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Runs until `stop` is set or a newer instance fences this one."""
        stop = stop or asyncio.Event()
        try:
            await self.start()
            while not stop.is_set():
                try:
                    await self.step()
                except SchedulerFenced:
                    raise
                except Exception:
                    # Never sequence on a state that may disagree with the journal: the next
                    # step first rebuilds it and seeks the inputs back to the committed offsets.
                    log.exception("scheduler step failed; recovering from the journal")
                    self._needs_recovery = True
                    await asyncio.sleep(1)
        except SchedulerFenced:
            log.warning(
                "scheduler %s fenced: another instance with transactional id %s took over; exiting",
                self.cluster,
                self.transactional_id,
            )
        finally:
            await self.stop()

    async def step(self) -> BatchOutcome | None:
        """Reads one batch (waiting up to tick_ms, or less when the core has something due
        sooner) and sequences it, or appends a Tick when the core has something due."""
        if self._needs_recovery:
            await self._recover(seek=True)
            self._needs_recovery = False
        consumer = self._require_consumer()
        wait_ms = self.state.cluster.tick_ms
        due = self._next_due()
        if due is not None:
            wait_ms = max(0, min(wait_ms, due - self.clock()))
        batch = await consumer.getmany(timeout_ms=wait_ms, max_records=self.max_batch)
        inputs = [record for tp in sorted(batch) for record in batch[tp]]
        outcome = None
        if inputs:
            outcome = await self._sequence(inputs)
        if outcome is None or outcome.journaled == 0:
            # Time only enters the journal through records: a Tick (or the NodesAlive that
            # the liveness tracker owes) lets timers and heartbeat expiry fire while nothing
            # else happens, and only then, so an idle journal stays still.
            due = self._next_due()
            if due is not None and self.clock() >= due:
                outcome = await self._tick()
        if outcome is None and self.clock() - self._last_commit_ms >= self.state.cluster.tick_ms:
            await self._confirm_epoch()
        return outcome

    async def _confirm_epoch(self) -> None:
        """An idle scheduler journals nothing, so it would not learn that a newer instance took
        over. A transaction that only commits the consumer's offsets again (no journal record)
        meets the newer epoch, so a fenced scheduler stops within tick_ms even when idle."""
        producer, consumer = self._require_producer(), self._require_consumer()
        offsets = {
            tp: OffsetAndMetadata(await consumer.position(tp), "") for tp in self._partitions
        }
        try:
            async with producer.transaction():
                await producer.send_offsets_to_transaction(offsets, self.group_id)
        except ProducerFenced as exc:
            raise SchedulerFenced(str(exc)) from exc
        except Exception as exc:
            if is_fatal(producer):
                raise SchedulerFenced(repr(exc)) from exc
            log.warning("idle epoch check failed (%r); recovering from the journal", exc)
            if isinstance(exc, PRODUCER_STATE_ERRORS):
                await self._restart_producer()
            self._needs_recovery = True
        self._last_commit_ms = self.clock()

    def _next_due(self) -> int | None:
        """When the core next has something due that no journal record has yet reached."""
        due = next_due_ts(self.state)
        # A due time the journal has passed was acted on by that record's cycle already.
        if due is not None and due <= self.state.ts:
            due = None
        refresh = self.liveness.refresh_at()  # nodes heard whose lease is half gone
        if refresh is not None and (due is None or refresh < due):
            return refresh
        return due

    # -- rebuild --------------------------------------------------------------------------

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
        consumer = self._require_consumer()
        for tp in self._partitions:
            offset = await consumer.committed(tp)
            if offset is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, offset)

    async def _recover(self, seek: bool) -> None:
        """After an aborted transaction: state back to the journal, inputs back to the offsets."""
        await self.rebuild()
        if seek:
            await self._seek_committed()

    # -- sequencing -----------------------------------------------------------------------

    async def _sequence(self, inputs: list[ConsumerRecord[bytes, bytes]]) -> BatchOutcome:
        """Sequences a batch, isolating any input the core cannot apply."""
        poisoned: dict[InputKey, str] = {}
        queue: list[list[ConsumerRecord[bytes, bytes]]] = [inputs]
        total = BatchOutcome()
        while queue:
            batch = queue.pop(0)
            try:
                outcome = await self._transact(batch, poisoned)
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
        self,
        inputs: Sequence[ConsumerRecord[bytes, bytes]],
        poisoned: dict[InputKey, str],
        *,
        tick: bool = False,
    ) -> BatchOutcome:
        """One transaction: journal records, rejections, commands and offsets, or none of them."""
        producer = self._require_producer()
        # Never reuse a ts: a later batch would otherwise join the previous group on replay.
        ts = max(self.clock(), self.state.ts + 1)
        outcome = BatchOutcome(ts=ts)
        pending = Pending()
        alive: list[NodesAlive] = []
        started = time.perf_counter()
        cycle_s = 0.0
        try:
            async with producer.transaction():
                # Nodes heard since their last journaled heartbeat go first, when the core
                # would otherwise find one of them silent in this batch's cycle.
                alive = self.liveness.due(self.state, ts)
                for event in alive:
                    await self._journal(event, ts, pending)
                    self._apply(event, ts, None)
                    outcome.journaled += 1
                for record in inputs:
                    await self._sequence_one(record, ts, poisoned, pending, outcome)
                if tick and not alive:
                    await self._journal(Tick(), ts, pending)
                    self._apply(Tick(), ts, None)
                    outcome.journaled += 1
                cycle_started = time.perf_counter()
                try:
                    self.state, commands = close_group(self.state, self.plugins)
                except Exception as exc:
                    raise CycleFailure(exc) from exc
                cycle_s = time.perf_counter() - cycle_started
                for command in commands:
                    pending.add(
                        await producer.send(
                            self.topics.commands,
                            command_bytes_or_fail(command),
                            key=command.node.encode(),
                        )
                    )
                outcome.commands = len(commands)
                offsets = next_offsets(inputs)
                if offsets:
                    await producer.send_offsets_to_transaction(offsets, self.group_id)
                if outcome.journaled and self.snapshots.due(self.state.seq, self.clock()):
                    await self._snapshot()
                await asyncio.gather(*pending.futures)
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
            if isinstance(exc, PRODUCER_STATE_ERRORS):
                await self._restart_producer()
            await self._recover(seek=True)
            return BatchOutcome(ts=ts, last_seq=self.state.seq, aborted=True)
        self.committed_seq = self.state.seq
        self._last_commit_ms = self.clock()
        self.liveness.committed(self.state, alive)
        self.snapshots.committed(self.clock())
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
        old = self._producer
        self._producer = None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.stop()
        producer = transactional_producer(self.bootstrap, self.transactional_id)
        await producer.start()
        self._producer = producer

    async def _snapshot(self) -> None:
        """The state after this batch's cycle, in this batch's transaction (so never ahead)."""
        if self._last_journal is None:
            return
        offset = (await self._last_journal).offset
        await self.snapshots.write(self._require_producer(), self.state, offset)

    async def _sequence_one(
        self,
        record: ConsumerRecord[bytes, bytes],
        ts: int,
        poisoned: dict[InputKey, str],
        pending: Pending,
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
        journaled = b""
        kind = "isolated"  # the kinds of refusal, for metrics: docs/operations.md
        if reason is None:
            try:
                # decode_ingress refuses an input over limits.INPUT_BYTES_MAX before parsing it.
                team = self._team_topics.get(record.topic)
                logical = JOBS if team else self.topics.logical(record.topic)
                event = decode_ingress(logical, record.value or b"")
                if team is not None:
                    reason = team_refusal(self.state, team[0], team[1], event)
                reason = reason or accept(self.state, event)
                kind = "refused"
            except DecodeError as exc:
                reason, kind = str(exc), "invalid"
            except Exception as exc:
                raise CoreFailure(key, exc) from exc
        if (
            reason is None
            and isinstance(event, NodeHeartbeat)
            and self.liveness.absorb(self.state, event, ts)
        ):
            outcome.heard += 1
            return  # nothing the core sees changed but time: no journal record
        if reason is None and event is not None:
            # Checked before sending: a record Kafka would refuse must not fail the batch.
            journaled, reason = journal_bytes(
                JournalRecord(seq=self.state.seq + 1, ts=ts, event=event)
            )
            kind = "unwritable"
        if reason is not None or event is None:
            await self._reject(record, ts, reason or "refused", pending)
            outcome.rejected += 1
            outcome.rejections.append(kind)
            return
        # The header names the input this record journals, so its producer can learn the
        # verdict; headers are not part of the record's bytes, so replay never sees them.
        self._last_journal = await self._require_producer().send(
            self.topics.journal, journaled, key=self._key, headers=source_headers(record)
        )
        pending.add(self._last_journal)
        self._apply(event, ts, key)
        outcome.journaled += 1

    async def _journal(self, event: Tick | NodesAlive, ts: int, pending: Pending) -> None:
        record = JournalRecord(seq=self.state.seq + 1, ts=ts, event=event)
        self._last_journal = await self._require_producer().send(
            self.topics.journal, encode_journal(record), key=self._key
        )
        pending.add(self._last_journal)

    def _apply(self, event: Event, ts: int, key: InputKey | None) -> None:
        try:
            apply(self.state, event, self.state.seq + 1, ts)
        except Exception as exc:
            if key is None:
                raise CycleFailure(exc) from exc
            raise CoreFailure(key, exc) from exc

    async def _reject(
        self, record: ConsumerRecord[bytes, bytes], ts: int, reason: str, pending: Pending
    ) -> None:
        # Bounded, with where the input came from, its size and hash (streams/records.py).
        raw = rejection_bytes(record, ts, reason)
        log.info("rejected %s: %s", where(record), clip(reason, REASON_CHARS_MAX))
        pending.add(await self._require_producer().send(self.topics.rejected, raw))

    # -- helpers --------------------------------------------------------------------------

    def ingress_reader(self) -> tuple[AIOKafkaConsumer | None, list[TopicPartition]]:
        """The ingress consumer and its partitions, for the lag behind the ingress topics."""
        return self._consumer, list(self._partitions)

    def _require_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("scheduler not started")
        return self._producer

    def _require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("scheduler not started")
        return self._consumer


async def run_scheduler(
    bootstrap: str,
    cluster: str = "default",
    topic_prefix: str = "",
    stop: asyncio.Event | None = None,
    topic_settings: TopicSettings | None = None,
    *,
    snapshot_records: int | None = None,
    snapshot_seconds: float | None = None,
    load_snapshots: bool = True,
    teams: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    liveness: bool = True,
) -> None:
    """Runs one cluster's scheduler until `stop` is set or it is fenced by a newer instance.

    With `metrics_port`, serves /metrics and /health there; with `liveness`, publishes its
    liveness to quotaflow.status (streams/status.py) while it runs.
    """
    monitor = SchedulerMonitor(cluster)
    scheduler = Scheduler(
        bootstrap,
        cluster,
        topic_prefix,
        topic_settings=topic_settings,
        snapshot_records=SNAPSHOT_RECORDS if snapshot_records is None else snapshot_records,
        snapshot_seconds=SNAPSHOT_SECONDS if snapshot_seconds is None else snapshot_seconds,
        load_snapshots=load_snapshots,
        teams=teams,
        monitor=monitor,
    )
    await observed(
        scheduler,
        monitor,
        stop or asyncio.Event(),
        metrics=(metrics_host, metrics_port),
        liveness=liveness,
        replication_factor=(topic_settings or TopicSettings()).replication_factor,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streams.sequencer", description="Run the QuotaFlow scheduler."
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--cluster", default="default", help="cluster id (journal key)")
    parser.add_argument("--topic-prefix", default="", help="prefix for every topic name")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--snapshot-records", type=int, default=SNAPSHOT_RECORDS, help="0: no snapshots"
    )
    parser.add_argument("--snapshot-seconds", type=float, default=SNAPSHOT_SECONDS)
    parser.add_argument("--ignore-snapshots", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await run_scheduler(
            args.bootstrap,
            args.cluster,
            args.topic_prefix,
            stop,
            snapshot_records=args.snapshot_records,
            snapshot_seconds=args.snapshot_seconds,
            load_snapshots=not args.ignore_snapshots,
        )

    asyncio.run(_main())
    return 0


if __name__ == "__main__":
    sys.exit(main())
