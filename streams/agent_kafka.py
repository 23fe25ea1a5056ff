"""The agent's Kafka side: where its commands and the scheduler's refusals are read from (I/O shell)."""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams import topics
from streams.agent_config import AgentConfig, partition_for
from streams.kafka_io import REQUEST_TIMEOUT_MS, partitions_of, topic_configs

POLL_MS = 200
# aiokafka retries an offset commit for as long as the group coordinator answers with
# retriable errors: a command reader stuck there would leave a node that heartbeats but
# never acts on a command. Past this bound the commit is given up (a warning); the next
# command's commit covers its offset, and after a restart the agent ignores commands read
# again that were addressed to its earlier incarnation (docs/cli.md, "Restarts").
COMMIT_BOUND_S = REQUEST_TIMEOUT_MS / 1000

log = logging.getLogger("quotaflow.agent")


class AgentError(RuntimeError):
    """The agent cannot run (e.g. its topics do not exist); the message says what to do."""


async def position_commands(consumer: AIOKafkaConsumer, config: AgentConfig) -> TopicPartition:
    """Assigns the node's commands partition at the committed position (first start: the end)."""
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
    return topic in await topic_configs(bootstrap, [topic])
