"""The scheduler's liveness on quotaflow.status and its metrics, against a real broker: a running
scheduler is `up` with its instance id, a stopped one says so; the snapshot age and the
rejection kinds appear in its metrics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from streams.metrics import SchedulerMonitor, generate_latest
from streams.sequencer import Scheduler
from streams.status import observed, read_status, verdict
from tests.streams.test_sequencer import NODE, QUEUE, WAIT_S, job, make_topics, produce, wait_for


def samples(monitor: SchedulerMonitor) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(monitor.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_liveness_says_up_then_stopped_and_metrics_count_what_happened(
    kafka_bootstrap: str,
) -> None:
    topics = await make_topics(kafka_bootstrap)
    monitor = SchedulerMonitor("default")
    scheduler = Scheduler(
        kafka_bootstrap, "default", topics.prefix, snapshot_records=1, monitor=monitor
    )
    stop = asyncio.Event()
    task = asyncio.create_task(observed(scheduler, monitor, stop))
    try:
        await produce(kafka_bootstrap, topics.admin, [QUEUE], key="default")
        await produce(kafka_bootstrap, topics.nodes, [NODE], key="node-a")

        async def configured() -> bool:
            return monitor.liveness.journal_seq >= 2

        await wait_for(configured, "the queue and the node journaled")
        await produce(kafka_bootstrap, topics.jobs, [job("j-1"), b"{not json", job("j-1")])

        async def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            s = samples(monitor)
            rejected = s.get(("quotaflow_rejections_total", (("kind", "refused"),)))
            return s if rejected == 1 else None

        s = await wait_for(counted, "the duplicate job refused")
        assert s[("quotaflow_rejections_total", (("kind", "invalid"),))] == 1
        assert s[("quotaflow_dispatches_total", (("reason", "quota"),))] == 1
        assert s[("quotaflow_queue_jobs", (("queue", "research"), ("status", "running")))] == 1
        assert s[("quotaflow_snapshot_age_seconds", ())] >= 0  # snapshots every record here
        assert s[("quotaflow_snapshots_total", (("outcome", "written"),))] >= 1
        assert s[("quotaflow_journal_records_total", (("kind", "event"),))] == 3

        async def up() -> dict[str, Any] | None:
            record = (await read_status(kafka_bootstrap, topics.prefix)).get("scheduler/default")
            return record if record and record["journal_seq"] >= 3 else None

        record = await wait_for(up, "the scheduler's liveness record")
        assert record["instance"] == monitor.liveness.instance
        assert verdict(record, time.time()) == "up"
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)
    record = (await read_status(kafka_bootstrap, topics.prefix))["scheduler/default"]
    assert record["active"] is False
    assert verdict(record, time.time()) == "stopped"


async def test_no_status_topic_reads_as_no_records(kafka_bootstrap: str) -> None:
    topics = await make_topics(kafka_bootstrap)
    assert await read_status(kafka_bootstrap, topics.prefix) == {}
