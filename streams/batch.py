"""One transaction's bookkeeping for the sequencer: outcomes, failures, pending sends (I/O shell).

Split from streams/sequencer.py along the transaction seam: what a batch produced, how a
failure is classified (an input the core cannot apply, a cycle that fails, output Kafka
refuses), and where an input came from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from domain.commands import NodeCommand
from domain.limits import clip
from streams.records import command_bytes

InputKey = tuple[str, int, int]  # topic, partition, offset

# A poisoned input whose rejection could not be written either: its offset commits, nothing else.
SKIP = "\x00skip"


class SchedulerFenced(Exception):
    """A newer scheduler with the same transactional id took over; this one must stop."""


class CoreFailure(Exception):
    """The core raised while applying an accepted input: that input is poisoned."""

    def __init__(self, key: InputKey, error: BaseException) -> None:
        super().__init__(f"{key}: {error!r}")
        self.key = key
        self.error = error


class CycleFailure(Exception):
    """The core raised while running a cycle: no single input is known to be at fault."""

    def __init__(self, error: BaseException, reason: str | None = None) -> None:
        super().__init__(repr(error))
        self.error = error
        self.reason = reason or f"internal error: {clip(repr(error))}"


class Unwritable(CycleFailure):
    """Something the batch produced cannot be written (encoding, size, Kafka refused it).

    Like a failing cycle it is isolated input by input; the input it follows is rejected.
    """


@dataclass(slots=True)
class BatchOutcome:
    """What one committed batch did (for logs and tests)."""

    journaled: int = 0
    rejected: int = 0
    heard: int = 0  # heartbeats that changed nothing but time: noted, not journaled
    commands: int = 0
    ts: int = 0
    last_seq: int = 0
    aborted: bool = False  # Kafka failed the transaction; inputs were sought back to re-read
    rejections: list[str] = field(default_factory=list)  # the kind of each refusal

    @property
    def wrote(self) -> bool:
        """Whether the batch wrote anything (journal records, rejections, commands)."""
        return bool(self.journaled or self.rejected or self.commands)


@dataclass(slots=True)
class Pending:
    """Sends of the open transaction, awaited before it commits so delivery errors surface."""

    futures: list[asyncio.Future[Any]] = field(default_factory=list)

    def add(self, future: asyncio.Future[Any]) -> None:
        # An aborted transaction never awaits its sends; mark their errors as seen so they
        # do not reach the event loop's "exception was never retrieved" log.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.futures.append(future)


def command_bytes_or_fail(command: NodeCommand) -> bytes:
    """The command's bytes; a command that cannot be written fails the batch as Unwritable."""
    raw, reason = command_bytes(command)
    if reason is not None:
        raise Unwritable(ValueError(reason), reason)
    return raw


def is_fatal(producer: AIOKafkaProducer) -> bool:
    manager = producer._txn_manager
    return manager is not None and bool(manager.is_fatal_error())


def key_of(record: ConsumerRecord[bytes, bytes]) -> InputKey:
    return (record.topic, record.partition, record.offset)


def where_key(key: InputKey) -> str:
    return f"{key[0]}[{key[1]}]@{key[2]}"


def where(record: ConsumerRecord[bytes, bytes]) -> str:
    return where_key(key_of(record))


def next_offsets(
    inputs: Sequence[ConsumerRecord[bytes, bytes]],
) -> dict[TopicPartition, OffsetAndMetadata]:
    offsets: dict[TopicPartition, int] = {}
    for record in inputs:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
    return {tp: OffsetAndMetadata(offset, "") for tp, offset in offsets.items()}
