"""The agent's Kafka side: where its commands and the scheduler's refusals are read from (I/O shell)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams import topics
from streams.agent_config import AgentConfig, partition_for
from streams.kafka_io import REQUEST_TIMEOUT_MS, partitions_of, security_options, topic_configs

POLL_MS = 200
# aiokafka retries an offset commit for as long as the group coordinator answers with
# retriable errors: a command reader stuck there would leave a node that heartbeats but
# never acts on a command. Past this bound the commit is given up (a warning); the next
# command's commit covers its offset, and after a restart the agent ignores commands read
# again that were addressed to its earlier incarnation (docs/cli.md, "Restarts").
COMMIT_BOUND_S = REQUEST_TIMEOUT_MS / 1000
# The same retries at start-up (the committed offset, a position, the topics' metadata) would
# leave an agent that never registers and says nothing. Past this bound a start-up step is
# given up: the agent stops with an error naming the step, and a supervisor starts it again.
START_BOUND_S = REQUEST_TIMEOUT_MS / 1000
T = TypeVar("T")

log = logging.getLogger("quotaflow.agent")


class AgentError(RuntimeError):
    """The agent cannot run (e.g. its topics do not exist); the message says what to do."""


def commands_consumer(config: AgentConfig) -> AIOKafkaConsumer:
    """The reader of the node's commands, in the agent's own consumer group: its position
    is committed after each command is acted on (`commit_within`)."""
    return AIOKafkaConsumer(
        bootstrap_servers=config.bootstrap,
        **security_options(),
        group_id=config.group_id,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="latest",
    )


def rejections_consumer(config: AgentConfig) -> AIOKafkaConsumer:
    """The reader of the scheduler's refusals (`watch_rejections`), in no group: it starts at
    the end each time."""
    return AIOKafkaConsumer(
        bootstrap_servers=config.bootstrap,
        **security_options(),
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="latest",
    )


async def within_start(step: Awaitable[T], what: str) -> T:
    """One start-up step, given up after START_BOUND_S with an error that says which."""
    try:
        return await asyncio.wait_for(step, START_BOUND_S)
    except TimeoutError:
        raise AgentError(
            f"Kafka did not answer within {START_BOUND_S:g}s while {what}: is the broker "
            "reachable and its group coordinator up? Start the agent again once it is"
        ) from None


async def position_commands(consumer: AIOKafkaConsumer, config: AgentConfig) -> TopicPartition:
    """Assigns the node's commands partition at the committed position (first start: the end)."""
    step = _position_commands(consumer, config)
    return await within_start(step, "reading the committed offset of this node's commands")


async def _position_commands(consumer: AIOKafkaConsumer, config: AgentConfig) -> TopicPartition:
    name = config.topic(topics.COMMANDS)
    partitions = await _partitions(config.bootstrap, name)
    partition = TopicPartition(name, partition_for(config.node, len(partitions)))
    consumer.assign([partition])
    committed = await consumer.committed(partition)
    if committed is None:
        # First start of this node: begin at the end, fixed now, before the first
        # heartbeat makes the scheduler aware of us.
        await consumer.seek_to_end(partition)
        position = await consumer.position(partition)
        await consumer.commit({partition: position})
    else:
        consumer.seek(partition, committed)
    return partition


async def commit_within(consumer: AIOKafkaConsumer, partition: TopicPartition, offset: int) -> None:
    """Commits the commands read up to `offset`, giving up after COMMIT_BOUND_S."""
    try:
        await asyncio.wait_for(consumer.commit({partition: offset}), COMMIT_BOUND_S)
    except TimeoutError:
        log.warning(
            "commit of %s at offset %d got no answer within %gs; the next command's commit "
            "covers it",
            partition,
            offset,
            COMMIT_BOUND_S,
        )


async def position_rejected(consumer: AIOKafkaConsumer, config: AgentConfig) -> None:
    """Rejections from now on (before the first heartbeat): a refusal of ours is seen."""
    step = _position_rejected(consumer, config)
    await within_start(step, "finding the end of the rejected topic")


async def _position_rejected(consumer: AIOKafkaConsumer, config: AgentConfig) -> None:
    partitions = await _partitions(config.bootstrap, config.topic(topics.REJECTED))
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    for partition in partitions:  # fix the position now, not at the first fetch
        await consumer.position(partition)


async def watch_rejections(consumer: AIOKafkaConsumer, instance: str, stop: asyncio.Event) -> None:
    """Ends the agent with the scheduler's reason when it refuses one of our heartbeats."""
    marker = f'"instance":"{instance}"'
    while not stop.is_set():
        batches = await consumer.getmany(timeout_ms=POLL_MS)
        for records in batches.values():
            for record in records:
                try:
                    rejection = orjson.loads(record.value or b"")
                    text, reason = str(rejection["input"]), str(rejection["reason"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue
                ours = marker in text or f"from {instance}" in reason
                if ours and "NodeHeartbeat" in text:
                    raise AgentError(f"the scheduler refused this agent's heartbeat: {reason}")


async def _partitions(bootstrap: str, topic: str) -> list[TopicPartition]:
    try:
        return await partitions_of(bootstrap, [topic])
    except RuntimeError:
        raise AgentError(
            f"topic {topic} does not exist on {bootstrap} "
            "(create the topics: quotaflow kafka topics, with the same --topic-prefix)"
        ) from None


async def topic_exists(bootstrap: str, topic: str) -> bool:
    configs = await within_start(topic_configs(bootstrap, [topic]), f"reading topic {topic}")
    return topic in configs
