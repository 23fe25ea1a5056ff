"""Streaming replay on a real broker: commands over partitions, a wrong command found, --until."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from cli.main import main as cli_main
from domain.codec import encode_journal
from domain.events import JournalRecord
from streams.kafka_io import Topics
from streams.replay import replay
from streams.topic_admin import TopicSettings, ensure_topics
from tests.domain.test_audit_stream import busy_journal
from tests.domain.test_snapshot_audit import commands_of
from tests.streams.test_sequencer import unique_prefix

CLUSTER = "replayed"


async def write(
    bootstrap: str, records: list[JournalRecord], commands: list[dict[str, Any]]
) -> Topics:
    """The journal (keyed by cluster) and the commands (keyed by node, three partitions)."""
    topics = Topics.for_prefix(unique_prefix())
    await ensure_topics(bootstrap, topics, TopicSettings(command_partitions=3))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send(topics.journal, encode_journal(r), key=CLUSTER.encode())
            for r in records
        ]
        sent += [
            await producer.send(topics.commands, orjson.dumps(c), key=str(c["node"]).encode())
            for c in commands
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return topics


async def test_replay_merges_the_command_partitions_and_reproduces_every_command(
    kafka_bootstrap: str,
) -> None:
    records = busy_journal()
    commands = commands_of(records)
    assert len({c["node"] for c in commands}) >= 2
    topics = await write(kafka_bootstrap, records, commands)
    report = await replay(kafka_bootstrap, topics.prefix, CLUSTER)
    assert report.ok, report.summary()
    assert report.journal_records == len(records)
    assert report.expected == report.observed == report.reproduced == len(commands)
    assert ": every command reproduced" in report.summary()


async def test_replay_reports_a_deliberately_wrong_command(kafka_bootstrap: str) -> None:
    records = busy_journal()
    commands = commands_of(records)
    wrong = len(commands) // 2
    commands[wrong] = {**commands[wrong], "job": "not-this-one"}
    topics = await write(kafka_bootstrap, records, commands)
    report = await replay(kafka_bootstrap, topics.prefix, CLUSTER)
    assert not report.ok
    assert report.reproduced == len(commands) - 1
    divergence = report.first_divergence
    assert divergence is not None and divergence.observed == commands[wrong]
    assert f"seq {commands[wrong]['seq']}, node {commands[wrong]['node']}" in report.summary()


async def test_replay_until_audits_only_the_journal_up_to_that_time(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    records = busy_journal(jobs=20)
    topics = await write(kafka_bootstrap, records, commands_of(records))
    until = records[len(records) // 2].ts
    report = await replay(kafka_bootstrap, topics.prefix, CLUSTER, until=until)
    assert report.ok, report.summary()
    assert report.journal_records == sum(1 for r in records if r.ts <= until)
    assert report.beyond_journal > 0  # the later commands are counted, not judged
    args = ["replay", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    args += ["--cluster", CLUSTER, "--until", str(until)]
    code = await asyncio.to_thread(cli_main, args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0] == report.summary()
    assert "state at" in out
