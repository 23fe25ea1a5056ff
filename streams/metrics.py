"""Prometheus metrics and liveness of the scheduler, and the HTTP server that serves /metrics and /health (I/O shell).

The sequencer has one seam: `SchedulerMonitor.committed(...)` after each committed
transaction. Everything read from the state (queues, jobs, nodes) is collected when
Prometheus scrapes, in the event loop that owns the state, so the scheduling loop pays
nothing for it. Names, labels and units: docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from domain.commands import Dispatch, NodeCommand, Preempt
from domain.gauges import state_gauges
from domain.state import State
from streams.snapshots import SnapshotWriter


class Scheduler(Protocol):
    """What the monitor reads of `streams.sequencer.Scheduler` (no import: no cycle)."""

    state: State
    snapshots: SnapshotWriter
    clock: Callable[[], int]

    def ingress_reader(self) -> tuple[Any, list[Any]]: ...


# Cycles take from tens of microseconds (nothing to do) to seconds (a big cluster's reclaim).
DURATION_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


def wall_s() -> float:
    return time.time()


def generate_latest(registry: CollectorRegistry) -> bytes:
    return _generate_latest(registry)


# -- the scheduler ------------------------------------------------------------------------------


@dataclass(slots=True)
class Liveness:
    """What `quotaflow status` and /health say about one scheduler process (wall clock, s)."""

    cluster: str
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started_s: float = field(default_factory=wall_s)
    active: bool = False  # holds the transactional id and sequences (False once fenced/stopped)
    last_journal_write_s: float | None = None
    last_tick_s: float | None = None
    journal_seq: int = 0
    journal_ts: int = 0
    ingress_lag: int | None = None  # records on the ingress topics not yet sequenced

    def as_dict(self) -> dict[str, Any]:
        return {
            "component": "scheduler",
            "cluster": self.cluster,
            "instance": self.instance,
            "active": self.active,
            "started_s": self.started_s,
            "last_journal_write_s": self.last_journal_write_s,
            "last_tick_s": self.last_tick_s,
            "journal_seq": self.journal_seq,
            "journal_ts": self.journal_ts,
            "ingress_lag": self.ingress_lag,
        }


class SchedulerMonitor:
    """The scheduler's counters, histograms and liveness, and a collector over its state."""

    def __init__(self, cluster: str) -> None:
        self.registry = CollectorRegistry()
        self.liveness = Liveness(cluster)
        self.scheduler: Scheduler | None = None
        r = self.registry
        self.cycle = Histogram(
            "quotaflow_scheduler_cycle_seconds",
            "Time to run one group's scheduling cycle",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.transaction = Histogram(
            "quotaflow_scheduler_transaction_seconds",
            "Time of one committed Kafka transaction (sequence, cycle, send, commit)",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.journaled = Counter(
            "quotaflow_journal_records", "Journal records written", ["kind"], registry=r
        )
        self.dispatches = Counter(
            "quotaflow_dispatches", "Dispatch commands sent", ["reason"], registry=r
        )
        self.preemptions = Counter(
            "quotaflow_preemptions", "Preempt commands sent", ["reason"], registry=r
        )
        self.snapshots = Counter(
            "quotaflow_snapshots",
            "State snapshots the scheduler tried to write, by outcome (written, refused, unencodable)",
            ["outcome"],
            registry=r,
        )
        self.rejections = Counter(
            "quotaflow_rejections",
            "Inputs refused (sent to quotaflow.rejected)",
            ["kind"],
            registry=r,
        )
        self.recoveries = Counter(
            "quotaflow_scheduler_recoveries",
            "Transactions given up and read back from the journal, by cause "
            "(stalled, kafka_error, step_failed)",
            ["cause"],
            registry=r,
        )
        r.register(_StateCollector(self))

    def attach(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def recovering(self, cause: str) -> None:
        """The scheduler gave a transaction or a step up and reads the journal back."""
        self.recoveries.labels(cause).inc()

    def committed(
        self,
        *,
        journaled: int,
        ticks: int,
        rejections: list[str],
        commands: list[NodeCommand],
        cycle_s: float,
        transaction_s: float,
        seq: int,
        ts: int,
    ) -> None:
        """One committed transaction (the sequencer's only hook)."""
        now = wall_s()
        live = self.liveness
        live.active = True
        live.journal_seq, live.journal_ts = seq, ts
        if journaled:
            live.last_journal_write_s = now
        if ticks:
            live.last_tick_s = now
            self.journaled.labels("tick").inc(ticks)
        if journaled - ticks:
            self.journaled.labels("event").inc(journaled - ticks)
        self.cycle.observe(cycle_s)
        self.transaction.observe(transaction_s)
        for command in commands:
            if isinstance(command, Dispatch):
                self.dispatches.labels(str(command.reason)).inc()
            elif isinstance(command, Preempt):
                self.preemptions.labels(str(command.reason)).inc()
        for kind in rejections:
            self.rejections.labels(kind).inc()

    async def refresh_lag(self) -> None:
        """Records left on the ingress topics: the consumer's high water minus its position."""
        scheduler = self.scheduler
        if scheduler is None:
            return
        consumer, partitions = scheduler.ingress_reader()
        if consumer is None:
            return
        lag = 0
        try:
            for tp in partitions:
                high = consumer.highwater(tp)
                if high is None:
                    continue
                lag += max(0, high - await consumer.position(tp))
        except Exception:
            return  # a partition being reassigned or a client stopping: keep the last value
        self.liveness.ingress_lag = lag

    def health(self) -> dict[str, Any]:
        return self.liveness.as_dict() | {"now_s": wall_s()}


class _StateCollector(Collector):
    """Gauges read from the scheduler's state at scrape time."""

    def __init__(self, monitor: SchedulerMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        monitor = self.monitor
        live = monitor.liveness
        yield gauge("quotaflow_scheduler_active", "1 while this instance sequences", live.active)
        yield gauge("quotaflow_journal_seq", "Last journal seq written", live.journal_seq)
        lag = GaugeMetricFamily(
            "quotaflow_scheduler_ingress_lag_records",
            "Records on the ingress topics not yet sequenced",
        )
        if live.ingress_lag is not None:
            lag.add_metric([], live.ingress_lag)
        yield lag
        for name, value, help_text in (
            (
                "quotaflow_scheduler_last_journal_write_timestamp_seconds",
                live.last_journal_write_s,
                "Wall time of the last journal write",
            ),
            (
                "quotaflow_scheduler_last_tick_timestamp_seconds",
                live.last_tick_s,
                "Wall time of the last Tick",
            ),
        ):
            family = GaugeMetricFamily(name, help_text)
            if value is not None:
                family.add_metric([], value)
            yield family
        scheduler = monitor.scheduler
        if scheduler is None:
            return
        yield from state_metrics(scheduler.state)
        snapshots = scheduler.snapshots
        age = GaugeMetricFamily(
            "quotaflow_snapshot_age_seconds", "Seconds since the newest snapshot was written"
        )
        if snapshots.enabled and snapshots.last is not None:
            age.add_metric([], max(0.0, (scheduler.clock() - snapshots.last_at) / 1000.0))
        yield age


def gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text)
    family.add_metric([], float(value))
    return family


def state_metrics(state: State) -> Iterator[Metric]:
    """Jobs, queues and nodes of the state as gauges (domain/gauges.py)."""
    for family in state_gauges(state):
        gauge = GaugeMetricFamily(f"quotaflow_{family.name}", family.help, labels=family.labels)
        for labels, value in family.samples:
            gauge.add_metric(labels, value)
        yield gauge


# -- serving ------------------------------------------------------------------------------------


def metrics_response(registry: CollectorRegistry) -> web.Response:
    response = web.Response(body=generate_latest(registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


@contextlib.asynccontextmanager
async def serving(
    host: str,
    port: int | None,
    registry: CollectorRegistry,
    health: Callable[[], dict[str, Any]],
    before: Callable[[], Awaitable[None]] | None = None,
) -> Any:
    """Serves GET /metrics and /health on host:port while the block runs (nothing when port is None)."""
    if port is None:
        yield None
        return

    async def metrics(_: web.Request) -> web.Response:
        if before is not None:
            await before()
        return metrics_response(registry)

    async def healthz(_: web.Request) -> web.Response:
        if before is not None:
            await before()
        return web.Response(body=orjson.dumps(health()), content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield runner
    finally:
        await runner.cleanup()


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Waits `seconds` or until `stop`; True when stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
