"""One scheduler instance run as Kafka elects it: a warm standby until active, then the sequencer (I/O shell).

The election itself (the leader group on ``quotaflow.leader``) is ``streams.leadership``;
the standby's journal following is ``streams.standby``. See docs/kafka.md, "Failover".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka.errors import KafkaError

from streams.kafka_io import (
    KafkaSecurity,
    Topics,
    TopicSettings,
    check_retention,
    ensure_topics,
    use_security,
)
from streams.leadership import (
    REFUSED,
    RETRY_PAUSE_S,
    Leadership,
    default_instance,
    ensure_leader_topic,
)
from streams.metrics import SchedulerMonitor
from streams.sequencer import Scheduler
from streams.snapshots import SNAPSHOT_RECORDS, SNAPSHOT_SECONDS
from streams.standby import Follower, WarmStart
from streams.status import observing

__all__ = ["run_scheduler_with_standby", "run_with_standby"]

log = logging.getLogger("quotaflow.leadership")

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
