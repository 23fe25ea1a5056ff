"""Which scheduler instance of a cluster is active, chosen by Kafka; the others wait as warm standbys (I/O shell).

Every instance joins one consumer group on a one-partition topic, ``quotaflow.leader``.
Kafka's group coordinator assigns that partition to exactly one live member: that member is
active and runs the sequencer; the others follow the journal (``streams.standby``) so their
state is current. When the active instance dies its group session expires
(``SESSION_TIMEOUT_MS``), the coordinator assigns the partition to a standby, and the
standby's transactional producer (the same transactional id) fences whatever the old one
might still try to commit. A sticky assignor keeps the partition where it is when standbys
join or leave. The active instance announces itself on the leader topic, so
``active_scheduler`` can say which one runs. See docs/kafka.md, "Failover".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from streams.kafka_io import (
    KafkaSecurity,
    Topics,
    TopicSettings,
    admin_client,
    check_retention,
    dumps,
    ensure_topics,
    idempotent_producer,
    loads,
    now_ms,
    partitions_of,
    read_to_end,
    security_options,
    use_security,
)
from streams.metrics import SchedulerMonitor
from streams.sequencer import Scheduler
from streams.snapshots import SNAPSHOT_RECORDS, SNAPSHOT_SECONDS
from streams.standby import Follower, WarmStart
from streams.status import observing

__all__ = [
    "LEADER_TOPIC",
    "ActiveScheduler",
    "Leadership",
    "active_scheduler",
    "default_instance",
    "run_scheduler_with_standby",
    "run_with_standby",
]

log = logging.getLogger("quotaflow.leadership")

LEADER_TOPIC = "quotaflow.leader"
# A dead active instance is noticed after this long (the broker's default minimum is 6 s).
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
RETRY_PAUSE_S = 2.0
# Refusals, not failures: retrying cannot help, so they end the run (the CLI names them).
REFUSED = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
)


def default_instance() -> str:
    """This process's instance name: host and pid."""
    return f"{socket.gethostname()}-{os.getpid()}"


def leader_topic(topics: Topics) -> str:
    return topics.name(LEADER_TOPIC)


def leader_group(topics: Topics, cluster: str) -> str:
    return f"{topics.prefix}quotaflow-scheduler-{cluster}-leader"


async def ensure_leader_topic(bootstrap: str, topics: Topics, settings: TopicSettings) -> None:
    """The leader topic: one partition, compacted (only the newest announcement matters)."""
    from aiokafka.admin import NewTopic

    admin = admin_client(bootstrap, request_timeout_ms=30_000)
    await admin.start()
    try:
        config = {
            "cleanup.policy": "compact",
            "min.insync.replicas": str(settings.min_insync_replicas),
        }
        response = await admin.create_topics(
            [NewTopic(leader_topic(topics), 1, settings.replication_factor, topic_configs=config)]
        )
        errors = [entry for entry in response.topic_errors if entry[1] not in (0, 36)]
        if errors:
            raise RuntimeError(f"could not create {leader_topic(topics)}: {errors}")
    finally:
        await admin.close()
    # The group's assignment is computed from metadata: a topic the leader does not see yet
    # would be assigned to nobody.
    await partitions_of(bootstrap, [leader_topic(topics)])


class Leadership(ConsumerRebalanceListener):  # type: ignore[misc]
    """This instance's membership of the leader group: ``active`` while it holds the partition."""

    def __init__(self, bootstrap: str, topics: Topics, cluster: str, instance: str) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.cluster = cluster
        self.instance = instance
        self.active = asyncio.Event()
        self.lost = asyncio.Event()
        self._tp = TopicPartition(leader_topic(topics), 0)
        self._consumer: AIOKafkaConsumer | None = None
        self._poll: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            **security_options(),
            group_id=leader_group(self.topics, self.cluster),
            client_id=self.instance,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            partition_assignment_strategy=(StickyPartitionAssignor,),
            # A just-created leader topic that the group leader's metadata did not show yet
            # is assigned to nobody until the next metadata refresh (then the group
            # rebalances): keep that short.
            metadata_max_age_ms=5000,
        )
        await self._consumer.start()
        self._consumer.subscribe([self._tp.topic], listener=self)
        self._poll = asyncio.create_task(self._keep_polling())

    async def stop(self) -> None:
        """Leave the group (at once, so a standby takes over without waiting for a timeout)."""
        if self._poll is not None:
            self._poll.cancel()
            with contextlib.suppress(BaseException):
                await self._poll
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
        self._consumer = self._poll = None

    async def _keep_polling(self) -> None:
        # Group membership (joins, heartbeats, rebalances) is driven by polling.
        assert self._consumer is not None
        while True:
            try:
                await self._consumer.getmany(timeout_ms=500)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("leader group poll failed (%r); retrying", exc)
                await asyncio.sleep(1)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # Eager rebalancing revokes everything first; wait for the new assignment.
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if self._tp in set(assigned):
            if not self.active.is_set():
                log.info(
                    "instance %s is now the active scheduler of %s", self.instance, self.cluster
                )
            self.lost.clear()
            self.active.set()
        else:
            if self.active.is_set():
                log.warning("instance %s is no longer the active scheduler", self.instance)
                self.lost.set()
            self.active.clear()

    async def announce(self) -> None:
        """Record on the leader topic that this instance is active, and since when."""
        producer = idempotent_producer(self.bootstrap)
        await producer.start()
        try:
            body = {"cluster": self.cluster, "instance": self.instance, "since": now_ms()}
            await producer.send_and_wait(self._tp.topic, dumps(body), key=self.cluster.encode())
        finally:
            await producer.stop()


@dataclass(frozen=True, slots=True)
class ActiveScheduler:
    """Which instance last became active, since when, and who is in the leader group now."""

    instance: str
    since: int
    members: tuple[str, ...]

    @property
    def live(self) -> bool:
        return self.instance in self.members

    @property
    def standbys(self) -> tuple[str, ...]:
        return tuple(member for member in self.members if member != self.instance)


async def active_scheduler(
    bootstrap: str, topic_prefix: str = "", cluster: str = "default"
) -> ActiveScheduler | None:
    """The cluster's active scheduler as announced (None when none ever announced itself)."""
    topics = Topics.for_prefix(topic_prefix)
    try:
        records = (await read_to_end(bootstrap, leader_topic(topics), timeout_s=15))[
            leader_topic(topics)
        ]
    except RuntimeError:  # no leader topic: no scheduler with standbys ever ran
        return None
    key = cluster.encode()
    announced = [loads(r.value) for r in records if r.key == key and r.value is not None]
    if not announced:
        return None
    newest = announced[-1]
    members = await _group_members(bootstrap, leader_group(topics, cluster))
    return ActiveScheduler(str(newest["instance"]), int(newest["since"]), members)


async def _group_members(bootstrap: str, group: str) -> tuple[str, ...]:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    members: list[str] = []
    for response in responses:
        for described in response.to_object()["groups"]:
            members.extend(str(member["client_id"]) for member in described["members"])
    return tuple(sorted(members))


SchedulerRun = Callable[
    [WarmStart | None, asyncio.Event, Callable[[], Awaitable[None]]], Awaitable[None]
]


async def run_with_standby(
    bootstrap: str,
    topics: Topics,
    cluster: str,
    instance: str,
    settings: TopicSettings,
    run_active: SchedulerRun,
    stop: asyncio.Event,
) -> None:
    """Wait as a warm standby until Kafka makes this instance active, run, and repeat until ``stop``.

    ``run_active(warm, lost, announce)`` runs the sequencer from ``warm`` until ``lost`` is
    set (or it is fenced), awaiting ``announce`` once it has started. A Kafka error (a broker
    that just died, an election under way) starts this over after a pause, as a standby.
    """
    while not stop.is_set():
        try:
            await _elect_and_run(bootstrap, topics, cluster, instance, settings, run_active, stop)
        except REFUSED:
            raise
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("scheduler instance %s: %r; starting over as a standby", instance, exc)
            await _first(stop.wait(), asyncio.sleep(RETRY_PAUSE_S))


async def _elect_and_run(
    bootstrap: str,
    topics: Topics,
    cluster: str,
    instance: str,
    settings: TopicSettings,
    run_active: SchedulerRun,
    stop: asyncio.Event,
) -> None:
    await ensure_leader_topic(bootstrap, topics, settings)
    leadership = Leadership(bootstrap, topics, cluster, instance)
    await leadership.start()
    try:
        while not stop.is_set():
            log.info("instance %s waits as a standby scheduler of %s", instance, cluster)
            follower = Follower(bootstrap, topics, cluster)
            following = asyncio.Event()
            follow = asyncio.create_task(follower.run(following))
            await _first(stop.wait(), leadership.active.wait())
            following.set()
            # The follower may be cut short anywhere (even inside its client's start); its
            # state is only used when the journal confirms it, so any ending will do.
            (ended_with,) = await asyncio.gather(follow, return_exceptions=True)
            if isinstance(ended_with, BaseException):
                log.info("standby follower ended with %r", ended_with)
            if stop.is_set():
                break
            ended = asyncio.Event()
            watcher = asyncio.create_task(_set_when_first(ended, stop, leadership.lost))
            try:
                await run_active(follower.warm(), ended, leadership.announce)
            finally:
                watcher.cancel()
            if not stop.is_set():
                # Fenced or demoted: give the group a moment to settle before following again.
                await asyncio.sleep(1)
    finally:
        await leadership.stop()


async def run_scheduler_with_standby(
    bootstrap: str,
    cluster: str = "default",
    topic_prefix: str = "",
    stop: asyncio.Event | None = None,
    topic_settings: TopicSettings | None = None,
    *,
    instance: str | None = None,
    snapshot_records: int | None = None,
    snapshot_seconds: float | None = None,
    load_snapshots: bool = True,
    teams: Mapping[str, str] | None = None,
    security: KafkaSecurity | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    liveness: bool = True,
) -> None:
    """``run_scheduler`` with leader election: active when Kafka says so, a warm standby before.

    ``security`` (None: the process's settings) becomes the process's client settings, so the
    leader group, the standby and the sequencer all use it. /metrics and /health (with
    ``metrics_port``) are served throughout, ``active`` false while a standby; liveness goes
    to quotaflow.status only while active, under this instance's name.
    """
    if security is not None:
        use_security(security)
    stop = stop or asyncio.Event()
    topics = Topics.for_prefix(topic_prefix)
    settings = topic_settings or TopicSettings()
    # A standby refuses a journal Kafka may delete at once, not when it becomes active.
    while True:
        try:
            await ensure_topics(bootstrap, topics, settings)
            await check_retention(bootstrap, topics)
            break
        except REFUSED:
            raise
        except (KafkaError, OSError, TimeoutError) as exc:  # a broker down: not a refusal
            log.warning("could not check the topics yet (%r); retrying", exc)
            await _first(stop.wait(), asyncio.sleep(RETRY_PAUSE_S))
            if stop.is_set():
                return

    async def run_active(
        warm: WarmStart | None, until: asyncio.Event, on_started: Callable[[], Awaitable[None]]
    ) -> None:
        scheduler = Scheduler(
            bootstrap,
            cluster,
            topic_prefix,
            topic_settings=settings,
            snapshot_records=SNAPSHOT_RECORDS if snapshot_records is None else snapshot_records,
            snapshot_seconds=SNAPSHOT_SECONDS if snapshot_seconds is None else snapshot_seconds,
            load_snapshots=load_snapshots,
            teams=teams,
            warm=warm,
            on_started=on_started,
            monitor=monitor,
        )
        try:
            await scheduler.run(until)
        finally:
            monitor.liveness.active = False

    name = instance or default_instance()
    monitor = SchedulerMonitor(cluster)
    monitor.liveness.instance = name

    async def run_all(until: asyncio.Event) -> None:
        await run_with_standby(bootstrap, topics, cluster, name, settings, run_active, until)

    await observing(
        bootstrap,
        topics,
        cluster,
        monitor,
        run_all,
        stop,
        metrics=(metrics_host, metrics_port),
        liveness=liveness,
        replication_factor=settings.replication_factor,
        standby=True,
    )


async def _set_when_first(target: asyncio.Event, *events: asyncio.Event) -> None:
    await _first(*(event.wait() for event in events))
    target.set()


async def _first(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
