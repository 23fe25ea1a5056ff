"""Hostile inputs on a real broker: each is rejected with a short reason and nothing behind it waits (real Kafka)."""

from __future__ import annotations

import hashlib
import uuid

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import streams.records
from domain import limits
from domain.codec import encode_command
from domain.commands import NodeCommand
from streams import topics as names
from streams.kafka_io import Topics, TopicSettings, ensure_topics
from tests.streams.test_rejections import _dispatched, _rejections, bad_then_good
from tests.streams.test_sequencer import (
    job,
    journal_of,
    make_topics,
    produce,
    running_scheduler,
    seed_cluster,
    unique_prefix,
)

ONE_MB = 1_000_000


def _big_job() -> bytes:
    """A JobSubmitted that is valid in every field but its size (~1 MB)."""
    base = orjson.dumps(job("big", labels={"blob": ""}))
    raw = orjson.dumps(job("big", labels={"blob": "x" * (ONE_MB - len(base))}))
    assert len(raw) == ONE_MB
    return raw


async def test_each_hostile_input_is_rejected_short_and_the_next_job_is_dispatched(
    kafka_bootstrap: str,
) -> None:
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    node_1e20 = {"type": "NodeHeartbeat", "node": "node-x", "capacity": {"gpu": 1e20}}
    # (topic, raw input, words the reason must contain)
    hostile: list[tuple[str, bytes, tuple[str, ...]]] = [
        (topics.jobs, b"\x01" * 200_000, ("input", "200000 bytes", str(limits.INPUT_BYTES_MAX))),
        (
            topics.jobs,
            orjson.dumps({"type": "T" * 600_000, "job": "x"}),
            ("input", str(limits.INPUT_BYTES_MAX)),
        ),
        (topics.jobs, _big_job(), ("input", f"{ONE_MB} bytes", str(limits.INPUT_BYTES_MAX))),
        (topics.nodes, orjson.dumps(node_1e20), ("capacity.gpu", str(limits.GPU_MAX))),
        (topics.jobs, orjson.dumps(job("gpu-1e20", gpu=1e20)), ("resources.gpu", "10000")),
        # Under the size limit, so the reason is built from the value: it quotes a prefix only.
        (topics.jobs, orjson.dumps({"type": "T" * 60_000}), ("type", "unknown event type")),
    ]
    _, rejected = await bad_then_good(kafka_bootstrap, topics, cluster, hostile)
    by_hash = {r["sha256"]: r for r in rejected}
    for topic, raw, words in hostile:
        entry = by_hash[hashlib.sha256(raw).hexdigest()]
        assert entry["type"] == "Rejected" and isinstance(entry["ts"], int)
        assert (entry["topic"], entry["partition"]) == (topic, 0)
        assert isinstance(entry["offset"], int)
        assert entry["size"] == len(raw)
        for word in words:
            assert word in entry["reason"], (raw[:80], entry["reason"])
        assert len(entry["reason"]) <= limits.REASON_CHARS_MAX + 40
        assert len(entry["input"]) <= limits.REJECTED_INPUT_CHARS_MAX
        assert entry["input_truncated"] == (len(raw) > limits.REJECTED_INPUT_CHARS_MAX)
        assert raw.decode("utf-8", "replace").startswith(entry["input"])
    # The reason for the 60 KB type quotes its first characters, not all of them.
    clipped = by_hash[hashlib.sha256(hostile[-1][1]).hexdigest()]["reason"]
    assert (
        "T" * limits.ECHO_CHARS_MAX in clipped and "T" * (limits.ECHO_CHARS_MAX + 1) not in clipped
    )

    journal = await journal_of(kafka_bootstrap, topics, cluster)
    assert [r.event.job for r in journal if r.event.type == "JobSubmitted"] == ["good-1"]
    assert [r.event.node for r in journal if r.event.type == "NodeHeartbeat"] == ["node-a"]

    # A restart does not meet the hostile inputs again: their offsets were committed.
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await produce(kafka_bootstrap, topics.jobs, [job("good-2")], key="good-2")
        await _dispatched(kafka_bootstrap, topics, "good-2")
    assert len(await _rejections(kafka_bootstrap, topics.rejected, len(hostile))) == len(hostile)


async def _topics_with_small_journal(bootstrap: str, max_message_bytes: int) -> Topics:
    """Topics whose journal takes only small records, so Kafka itself refuses a big one."""
    topics = Topics.for_prefix(unique_prefix())
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        journal = TopicSettings().config(names.JOURNAL)  # what the scheduler checks on start
        config = {**journal, "max.message.bytes": str(max_message_bytes)}
        await admin.create_topics([NewTopic(topics.journal, 1, 1, topic_configs=config)])
    finally:
        await admin.close()
    await ensure_topics(bootstrap, topics)
    return topics


async def test_a_record_kafka_refuses_rejects_its_input_and_the_rest_of_the_batch_goes_on(
    kafka_bootstrap: str,
) -> None:
    # The journal takes records of at most 4000 bytes; a job with 8 KB of labels is valid
    # (under every limit of QuotaFlow's own) but its journal record is refused by the broker.
    topics = await _topics_with_small_journal(kafka_bootstrap, 4000)
    cluster = "c-" + uuid.uuid4().hex[:6]
    labelled = job("labelled", labels={f"k{i}": "v" * 1000 for i in range(8)})
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await seed_cluster(kafka_bootstrap, topics, cluster)
        # One producer, in order: when the scheduler is fast enough these are one batch.
        await produce(kafka_bootstrap, topics.jobs, [job("before"), labelled, job("after")])
        await _dispatched(kafka_bootstrap, topics, "after")
        rejected = await _rejections(kafka_bootstrap, topics.rejected, 1)

    assert len(rejected) == 1
    assert rejected[0]["sha256"] == hashlib.sha256(orjson.dumps(labelled)).hexdigest()
    assert rejected[0]["input"].startswith('{"type":"JobSubmitted","job":"labelled"')
    assert "Kafka refused" in rejected[0]["reason"]
    assert "MessageSizeTooLarge" in rejected[0]["reason"]
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    submitted = [r.event.job for r in journal if r.event.type == "JobSubmitted"]
    assert submitted == ["before", "after"]
    assert [r.seq for r in journal] == list(range(1, len(journal) + 1))


async def test_a_command_that_cannot_be_encoded_rejects_the_input_that_caused_it(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limits keep every command encodable; this stands in for a core that one day is not.
    topics = await make_topics(kafka_bootstrap)
    cluster = "c-" + uuid.uuid4().hex[:6]
    real_encode = encode_command

    def encode(command: NodeCommand) -> bytes:
        if command.job == "boom":
            raise OverflowError("Integer exceeds 64-bit range")
        return real_encode(command)

    monkeypatch.setattr(streams.records, "encode_command", encode)
    async with running_scheduler(kafka_bootstrap, topics, cluster):
        await seed_cluster(kafka_bootstrap, topics, cluster)
        await produce(kafka_bootstrap, topics.jobs, [job("before"), job("boom"), job("after")])
        await _dispatched(kafka_bootstrap, topics, "after")
        rejected = await _rejections(kafka_bootstrap, topics.rejected, 1)

    assert len(rejected) == 1
    assert orjson.loads(rejected[0]["input"])["job"] == "boom"
    assert "Dispatch of job boom to node node-a cannot be encoded" in rejected[0]["reason"]
    journal = await journal_of(kafka_bootstrap, topics, cluster)
    submitted = [r.event.job for r in journal if r.event.type == "JobSubmitted"]
    assert submitted == ["before", "after"]
