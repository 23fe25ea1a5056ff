"""Topic configuration on a real broker: a journal Kafka cannot delete, and a scheduler that checks it."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams import topics as names
from streams.kafka_io import (
    TOPIC_CONFIGS,
    Topics,
    TopicSettings,
    ensure_topics,
    retention_problems,
    topic_configs,
)
from tests.e2e.test_agent_flow import ROOT, quotaflow_command

WEEK_MS = "604800000"


def fresh_topics() -> Topics:
    return Topics.for_prefix(f"cfg-{uuid.uuid4().hex[:8]}.")


def test_every_topic_is_created_with_its_documented_configuration(kafka_bootstrap: str) -> None:
    topics = fresh_topics()
    asyncio.run(ensure_topics(kafka_bootstrap, topics, TopicSettings(command_partitions=2)))
    found = asyncio.run(topic_configs(kafka_bootstrap, topics.all))
    assert set(found) == set(topics.all)
    journal = found[topics.journal]
    assert (journal["cleanup.policy"], journal["retention.ms"], journal["retention.bytes"]) == (
        "delete",
        "-1",
        "-1",
    )
    commands = found[topics.commands]  # the audit compares every command the journal explains
    assert (commands["retention.ms"], commands["retention.bytes"]) == ("-1", "-1")
    snapshots = found[topics.snapshots]
    assert (snapshots["cleanup.policy"], snapshots["retention.ms"]) == ("compact", "-1")
    assert found[topics.rejected]["retention.ms"] == str(30 * 24 * 3600 * 1000)
    for logical in names.INGRESS:
        assert found[topics.name(logical)]["retention.ms"] == str(7 * 24 * 3600 * 1000)
    for logical, config in TOPIC_CONFIGS.items():
        for key, value in config.items():
            assert found[topics.name(logical)][key] == value, (logical, key)
        assert found[topics.name(logical)]["min.insync.replicas"] == "1"
    assert retention_problems(journal, snapshots) == []


def test_creating_again_leaves_existing_topics_as_they_are(kafka_bootstrap: str) -> None:
    topics = fresh_topics()
    asyncio.run(ensure_topics(kafka_bootstrap, topics))
    asyncio.run(ensure_topics(kafka_bootstrap, topics))  # idempotent: no error
    assert set(asyncio.run(topic_configs(kafka_bootstrap, topics.all))) == set(topics.all)


@pytest.mark.parametrize(
    ("journal", "snapshots", "problem"),
    [
        ({"cleanup.policy": "delete", "retention.ms": WEEK_MS, "retention.bytes": "-1"}, None,
         f"journal retention.ms is {WEEK_MS}; it must be -1"),
        ({"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "1000"}, None,
         "journal retention.bytes is 1000; it must be -1"),
        ({"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}, None,
         "journal cleanup.policy is compact"),
        ({"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
         {"cleanup.policy": "delete"}, "snapshots cleanup.policy is delete; it must be compact"),
        (None, None, "the journal topic does not exist"),
    ],
)  # fmt: skip
def test_what_lets_kafka_delete_what_the_scheduler_needs(
    journal: dict[str, str] | None, snapshots: dict[str, str] | None, problem: str
) -> None:
    (found,) = retention_problems(journal, snapshots)
    assert problem in found


async def create_with_finite_journal(bootstrap: str, topics: Topics) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topics.journal, 1, 1, topic_configs={"retention.ms": WEEK_MS})]
        )
    finally:
        await admin.close()
    await ensure_topics(bootstrap, topics)  # the others as usual; the journal stays as it is


def test_the_scheduler_refuses_a_journal_with_finite_retention(kafka_bootstrap: str) -> None:
    topics = fresh_topics()
    asyncio.run(create_with_finite_journal(kafka_bootstrap, topics))
    result = subprocess.run(
        [*quotaflow_command(), "scheduler", "--bootstrap", kafka_bootstrap,
         "--topic-prefix", topics.prefix],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("quotaflow: scheduler: refusing to run: Kafka may delete records")
    assert f"journal retention.ms is {WEEK_MS}; it must be -1" in line
    assert f"--entity-name {topics.journal}" in line
