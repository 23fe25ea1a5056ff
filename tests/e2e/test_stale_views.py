"""The view commands warn in one line on stderr when the scheduler's liveness on quotaflow.status is old or missing."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from cli.staleness import scheduler_down
from streams.kafka_io import Topics, ensure_topics
from streams.status import ensure_status_topic, status_topic
from tests.e2e.projections_process import cli

pytestmark = pytest.mark.e2e

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ({}, "no scheduler has published its liveness on quotaflow.status"),
        ({"projections/h:1": {"published_s": NOW}}, "no scheduler has published its liveness"),
        ({"scheduler/default": {"published_s": NOW - 1, "active": True}}, None),
        (
            {"scheduler/default": {"published_s": NOW - 60, "active": True}},
            "the scheduler's last liveness record on quotaflow.status is 60 s ago",
        ),
        (
            {"scheduler/default": {"published_s": NOW - 3 * 3600, "active": True}},
            "the scheduler's last liveness record on quotaflow.status is 3 h ago",
        ),
        ({"scheduler/default": {"published_s": NOW - 5, "active": False}}, "stopped 5 s ago"),
        (
            {"scheduler/default": {"active": True}},
            "liveness record on quotaflow.status has no time",
        ),
        # Any scheduler up under these topics is enough (one cluster per journal, normally one key).
        (
            {
                "scheduler/a": {"published_s": NOW - 600, "active": True},
                "scheduler/b": {"published_s": NOW - 2, "active": True},
            },
            None,
        ),
    ],
)
def test_the_reason_names_what_the_liveness_records_say(
    records: dict[str, dict[str, object]], expected: str | None
) -> None:
    reason = scheduler_down(records, NOW)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


async def publish(bootstrap: str, topic: str, published_s: float) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        body = {"published_s": published_s, "active": True, "instance": "test"}
        await producer.send_and_wait(topic, orjson.dumps(body), key=b"scheduler/default")
    finally:
        await producer.stop()


async def test_queues_jobs_and_explain_warn_while_the_scheduler_is_down(
    kafka_bootstrap: str,
) -> None:
    prefix = f"stale-{uuid.uuid4().hex[:8]}."
    await ensure_topics(kafka_bootstrap, Topics.for_prefix(prefix))
    kafka = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]

    # Given no scheduler ever published its liveness: each view answers, and warns in one line
    for command in (["queues"], ["jobs"], ["explain", "nobody"]):
        result = cli(*command, *kafka)
        assert result.returncode in (0, 1), result.stderr  # explain: 1 for an unknown job
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("quotaflow: warning: no scheduler has published"), lines
        assert "may be stale" in lines[0]

    # Given its last record is a minute old: the warning says how old
    topic = status_topic(prefix)
    await ensure_status_topic(kafka_bootstrap, topic)
    await publish(kafka_bootstrap, topic, time.time() - 60)
    stale = cli("queues", *kafka)
    assert stale.returncode == 0 and stale.stderr.count("\n") == 1, stale.stderr
    assert "last liveness record on " + topic[len(prefix) :] in stale.stderr

    # Given a fresh record: no warning; nor for a saved journal or a past time
    await publish(kafka_bootstrap, topic, time.time())
    fresh = cli("queues", *kafka)
    assert fresh.returncode == 0 and fresh.stderr == "", fresh.stderr
    await publish(kafka_bootstrap, topic, time.time() - 60)
    past = cli("queues", *kafka, "--at", str(int(time.time() * 1000)))
    assert past.returncode == 0 and past.stderr == "", past.stderr
