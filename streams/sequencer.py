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
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from domain.decider import initial_state
from domain.liveness import LivenessTracker
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State
from streams.batch import BatchOutcome, SchedulerFenced
from streams.batch_window import BatchWindow
from streams.gc_policy import CollectorPolicy
from streams.kafka_io import (
    SCHEDULER_BATCH_WINDOW_MS,
    SCHEDULER_FETCH_MIN_BYTES,
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
from streams.metrics import SchedulerMonitor
from streams.recovery import Recovery
from streams.snapshots import SNAPSHOT_RECORDS, SNAPSHOT_SECONDS, SnapshotWriter
from streams.standby import WarmStart
from streams.status import observed
from streams.transaction import BatchTransactions

__all__ = ["Scheduler", "SchedulerFenced", "main", "run_scheduler"]

log = logging.getLogger("quotaflow.scheduler")

MAX_BATCH = 500  # inputs per transaction: bounds how much one abort throws away


class Scheduler(Recovery, BatchTransactions):
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
        batch_window_ms: int = SCHEDULER_BATCH_WINDOW_MS,
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
        self.window = BatchWindow(batch_window_ms)  # under load, inputs share transactions
        self._stop = asyncio.Event()  # set by the caller of `run` to stop it
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
        # Heartbeats heard but not journaled (they changed nothing but time); see
        # domain/liveness.py. Lost on a restart at no cost: agents keep heartbeating.
        self.liveness = LivenessTracker()
        self._last_commit_ms = 0  # clock of the last transaction that reached the broker
        self._deferred = {}  # offsets of inputs that wrote nothing, not yet committed
        # The state is frozen out of garbage collection between full passes every 10 min.
        self.collector = CollectorPolicy()
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
            self.bootstrap,
            self.group_id,
            fetch_max_wait_ms=SCHEDULER_FETCH_WAIT_MS,
            fetch_min_bytes=SCHEDULER_FETCH_MIN_BYTES,
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
        self.collector.settle()  # the rebuilt state, frozen before the first step
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
            if client is not None:  # a client stuck on a silent broker is left behind
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), self.transaction_bound_s)
        self._consumer = self._producer = None

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Runs until `stop` is set or a newer instance fences this one."""
        stop = self._stop = stop or asyncio.Event()
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
                    if self.monitor is not None:
                        self.monitor.recovering("step_failed")
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
        batch = await self.window.first(consumer, wait_ms, self.max_batch, self._stop.is_set)
        if batch:
            await self.window.gather(consumer, batch, self.max_batch)
        inputs = [record for tp in sorted(batch) for record in batch[tp]]
        outcome = None
        if inputs:
            began = self.window.now()
            outcome = await self._sequence(inputs)
            if outcome.wrote:
                self.window.wrote(began)
        if outcome is None or outcome.journaled == 0:
            # Time only enters the journal through records: a Tick (or the NodesAlive that
            # the liveness tracker owes) lets timers and heartbeat expiry fire while nothing
            # else happens, and only then, so an idle journal stays still.
            due = self._next_due()
            if due is not None and self.clock() >= due:
                outcome = await self._tick()
        if outcome is None and self.clock() - self._last_commit_ms >= self.state.cluster.tick_ms:
            await self._confirm_epoch()
        if self._snapshot_owed is not None:
            await self.write_owed_snapshot()
        self.collector.after_step()
        return outcome

    def _next_due(self) -> int | None:
        """When the core next has something due that no journal record has yet reached."""
        due = self._core_due()
        # A due time the journal has passed was acted on by that record's cycle already.
        if due is not None and due <= self.state.ts:
            due = None
        refresh = self.liveness.refresh_at()  # nodes heard whose lease is half gone
        if refresh is not None and (due is None or refresh < due):
            return refresh
        return due

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
