"""Records the scheduler writes, bounded and checked before sending, and the Kafka errors that blame them (I/O shell).

Every record is encoded and measured here before it reaches the producer, so a record Kafka
would refuse becomes a reason to reject the input behind it instead of a failed transaction.
See docs/scheduler.md ("Limits").
"""

from __future__ import annotations

import hashlib

from aiokafka import ConsumerRecord
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from domain.codec import encode_command, encode_journaled
from domain.commands import NodeCommand, Rejected
from domain.events import Event
from domain.limits import REASON_CHARS_MAX, RECORD_BYTES_MAX, REJECTED_INPUT_CHARS_MAX, clip
from streams.kafka_io import dumps

__all__ = [
    "PRODUCER_STATE_ERRORS",
    "RECORD_REFUSALS",
    "command_bytes",
    "describe",
    "journal_bytes",
    "rejection_bytes",
]

# Kafka's refusals of the records themselves: retrying the same records can never succeed.
RECORD_REFUSALS = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    CorruptRecordException,
    InvalidTimestampError,
)
# The producer's own sequence state disagrees with the broker's: only a new epoch clears it.
PRODUCER_STATE_ERRORS = (OutOfOrderSequenceNumber,)


def _checked(raw: bytes, what: str) -> tuple[bytes, str | None]:
    if len(raw) > RECORD_BYTES_MAX:
        return b"", f"{what} would be {len(raw)} bytes, over the limit of {RECORD_BYTES_MAX} bytes"
    return raw, None


def journal_bytes(event: Event, seq: int, ts: int) -> tuple[bytes, str | None]:
    """The bytes of the journal record of `event` at `seq` and `ts`, or the reason it cannot
    be written (encoded once, straight from the validated event: no JournalRecord is built)."""
    try:
        raw = encode_journaled(event, seq, ts)
    except Exception as exc:
        return b"", f"journal record cannot be encoded: {clip(str(exc))}"
    return _checked(raw, "journal record")


def command_bytes(command: NodeCommand) -> tuple[bytes, str | None]:
    """The command's bytes, or the reason it cannot be written."""
    what = f"{command.type} of job {command.job} to node {command.node}"
    try:
        raw = encode_command(command)
    except Exception as exc:
        return b"", f"{what} cannot be encoded: {clip(str(exc))}"
    return _checked(raw, what)


def rejection_bytes(record: ConsumerRecord[bytes, bytes], ts: int, reason: str) -> bytes:
    """The contract's Rejected, bounded, plus where the input came from and what it was."""
    raw = record.value or b""
    # Decoding a bounded head is enough: each character takes at most 4 bytes.
    text = raw[: 4 * REJECTED_INPUT_CHARS_MAX + 4].decode("utf-8", "replace")
    wire = Rejected(
        ts=ts, input=text[:REJECTED_INPUT_CHARS_MAX], reason=clip(reason, REASON_CHARS_MAX)
    ).to_wire()
    wire.update(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        size=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
        input_truncated=len(text) > REJECTED_INPUT_CHARS_MAX,
    )
    return dumps(wire)


SOURCE_HEADER = "quotaflow.source"


def source_headers(record: ConsumerRecord[bytes, bytes]) -> list[tuple[str, bytes]]:
    """The journal record's header naming its input: topic, partition and offset, as JSON."""
    where = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
    return [(SOURCE_HEADER, dumps(where))]


def describe(exc: BaseException) -> str:
    """An exception as a short reason: its type, and its message when it has one."""
    return clip(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
