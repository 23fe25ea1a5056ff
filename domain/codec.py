"""Bytes to events and back with orjson; refusals come back as reasons a person can act on (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Union

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from domain.commands import Command
from domain.events import (
    EVENT_TYPES,
    ClusterConfigured,
    Event,
    JobCancelled,
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JournalRecord,
    NodeHeartbeat,
    QueueConfigured,
    QueueDeleted,
)
from domain.limits import (
    ECHO_CHARS_MAX,
    INPUT_BYTES_MAX,
    LINE_BYTES_MAX,
    REASON_ERRORS_MAX,
    TS_MAX,
    clip,
)
from domain.plugins import validation_context
from domain.wire_types import Strict

# Which event types each ingress topic accepts, so ACLs on topics mean something.
INGRESS_TYPES: dict[str, tuple[type[Strict], ...]] = {
    "quotaflow.jobs": (JobSubmitted, JobCancelled),
    "quotaflow.nodes": (NodeHeartbeat, JobStarted, JobFinished, JobPreempted),
    "quotaflow.admin": (QueueConfigured, QueueDeleted, ClusterConfigured),
}

CURRENT_VERSION = 1

# Upcasters migrate an old journal record's raw dict, one version step at a time, before
# validation: (type, from_version) -> function returning the dict at from_version + 1.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


class DecodeError(ValueError):
    """Input that cannot become an event; the message is the reason sent to quotaflow.rejected.

    `ts` is the input's own time when it could be read (a timed line that fails validation).
    """

    def __init__(self, reason: str, ts: int | None = None) -> None:
        super().__init__(reason)
        self.ts = ts


def describe_validation_error(error: ValidationError) -> str:
    """One line naming each bad field and what is wrong with it (a few fields, each clipped).

    Field names can be input too (an unknown field, a label key), so every part is clipped.
    """
    parts = []
    items = error.errors(include_url=False)
    for item in items[:REASON_ERRORS_MAX]:
        location = ".".join(clip(str(part)) for part in item["loc"]) or "(object)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown field (unknown fields are refused)"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        parts.append(f"{location}: {clip(message, 2 * ECHO_CHARS_MAX)}")
    if len(items) > REASON_ERRORS_MAX:
        parts.append(f"and {len(items) - REASON_ERRORS_MAX} more")
    return "; ".join(parts)


def _size(raw: bytes | str) -> int:
    return len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)


def check_size(raw: bytes | str, limit: int, what: str) -> None:
    """Refuses input over `limit` bytes before it is parsed at all."""
    size = _size(raw)
    if size > limit:
        raise DecodeError(f"{what}: {size} bytes, over the limit of {limit} bytes")


def _load_object(raw: bytes | str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise DecodeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _validate(data: dict[str, Any], allowed: tuple[type[Strict], ...] | None) -> Event:
    kind = data.get("type")
    if not isinstance(kind, str):
        raise DecodeError("type: missing or not a string (every object names its type)")
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        known = ", ".join(sorted(EVENT_TYPES))
        raise DecodeError(f"type: unknown event type {clip(kind)!r} (known: {known})")
    if allowed is not None and cls not in allowed:
        names = ", ".join(c.__name__ for c in allowed)
        raise DecodeError(f"type: {kind} is not accepted on this topic (accepted: {names})")
    try:
        event: Event = cls.model_validate(data, context=validation_context())  # type: ignore[assignment]
    except ValidationError as exc:
        raise DecodeError(f"{kind}: {describe_validation_error(exc)}") from None
    return event


def decode_ingress(topic: str, raw: bytes | str) -> Event:
    """Decodes a producer's or agent's event from an ingress topic; raises DecodeError."""
    check_size(raw, INPUT_BYTES_MAX, "input")
    fast = _fast_ingress(topic, raw)
    if fast is not None:
        return fast
    data = _load_object(raw)
    for stamped in ("seq", "ts"):
        if stamped in data:
            raise DecodeError(f"{stamped}: stamped by the scheduler; producers must not send it")
    allowed = INGRESS_TYPES.get(topic)
    if allowed is None:
        raise DecodeError(f"topic {topic!r} is not an ingress topic")
    return _validate(data, allowed)


def decode_timed(raw: bytes | str) -> tuple[int, Event]:
    """Decodes one simulation line: an event or Tick with its `ts` (`seq` optional and ignored)."""
    if _size(raw) > LINE_BYTES_MAX:
        # A reader may hand over only a long line's first bytes, so no exact size is claimed.
        raise DecodeError(f"line: more than {LINE_BYTES_MAX} bytes, over the limit for one line")
    data = _load_object(raw)
    ts = data.pop("ts", None)
    data.pop("seq", None)
    if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
        raise DecodeError("ts: required, integer milliseconds since the Unix epoch")
    if ts > TS_MAX:
        raise DecodeError(f"ts: {ts} is over the limit {TS_MAX} (9999-12-31T23:59:59.999Z)")
    try:
        return ts, _validate(data, None)
    except DecodeError as exc:
        raise DecodeError(str(exc), ts) from None


def _union_adapter(types: tuple[type[Strict], ...]) -> TypeAdapter[Event]:
    """One validator for these event types, chosen by `type`, that parses JSON itself."""
    union: Any = Union[types]  # noqa: UP007 (a union built from a tuple of classes)
    return TypeAdapter(Annotated[union, Field(discriminator="type")])


# The fast path: pydantic-core parses and validates the bytes in one pass. It is taken only
# when it succeeds; anything it refuses goes through orjson and the event type's own
# validation, so every refusal keeps the reasons quotaflow.rejected documents. A property
# test (tests/domain/test_codec_fast_path.py) holds both paths to the same events.
_INGRESS_ADAPTERS = {topic: _union_adapter(types) for topic, types in INGRESS_TYPES.items()}
_EVENT_ADAPTER = _union_adapter(tuple(EVENT_TYPES.values()))
# A journal record as encode_journal writes it: the event's fields, then seq and ts last.
_JOURNAL_TAIL = re.compile(rb',"seq":(0|[1-9][0-9]{0,17}),"ts":(0|[1-9][0-9]{0,17})\}$')


def _fast_ingress(topic: str, raw: bytes | str) -> Event | None:
    adapter = _INGRESS_ADAPTERS.get(topic)
    if adapter is None:
        return None
    try:
        return adapter.validate_json(raw, context=validation_context())
    except (ValidationError, ValueError):
        return None


def _fast_journal(raw: bytes | str) -> JournalRecord | None:
    if not isinstance(raw, bytes):
        return None
    raw = raw.rstrip(b"\r\n")
    tail = _JOURNAL_TAIL.search(raw, max(0, len(raw) - 48))
    if tail is None:
        return None
    try:
        event = _EVENT_ADAPTER.validate_json(
            raw[: tail.start()] + b"}", context=validation_context()
        )
    except (ValidationError, ValueError):
        return None
    return _journal_record(int(tail[1]), int(tail[2]), event)


def _journal_record(seq: int, ts: int, event: Event) -> JournalRecord:
    """`JournalRecord.model_construct(seq=, ts=, event=)` without its Python overhead (6 us a
    record, more than validating the event's JSON): the fields are already validated. The
    same build as domain/trusted.py's, written out for three fields: this runs per record."""
    record = _new(JournalRecord)
    _set(record, "__dict__", {"seq": seq, "ts": ts, "event": event})
    _set(record, "__pydantic_fields_set__", {"seq", "ts", "event"})
    _set(record, "__pydantic_extra__", None)
    _set(record, "__pydantic_private__", None)
    return record


_new = object.__new__
_set = object.__setattr__


def _upcast(data: dict[str, Any]) -> dict[str, Any]:
    version = data.pop("version", CURRENT_VERSION)
    kind = str(data.get("type"))
    while version < CURRENT_VERSION:
        data = UPCASTERS[(kind, version)](data)
        version += 1
    return data


def decode_journal(raw: bytes | str) -> JournalRecord:
    """Decodes a journal record, upcasting older versions first."""
    fast = _fast_journal(raw)
    if fast is not None:
        return fast
    data = _upcast(_load_object(raw))
    seq = data.pop("seq", None)
    ts = data.pop("ts", None)
    if not isinstance(seq, int) or not isinstance(ts, int):
        raise DecodeError("journal record without integer seq and ts")
    # The event is validated once, by its own type; validating the record again would only
    # re-check the event against the union (measured: 10.1 -> 9.7 us a record).
    return _journal_record(seq, ts, _validate(data, None))


def event_to_wire(event: Event) -> dict[str, Any]:
    """The event as a JSON-ready dict, with defaults written out so the journal is explicit."""
    return event.model_dump(mode="json", exclude_none=False)


def encode_journal(record: JournalRecord) -> bytes:
    return encode_journaled(record.event, record.seq, record.ts)


def encode_journaled(event: Event, seq: int, ts: int) -> bytes:
    """The journal record of `event` at `seq` and `ts`, without building a JournalRecord.

    pydantic-core writes the event's JSON itself (the bytes `orjson.dumps(event_to_wire(event))`
    gives, without the dict between: a property test holds the two equal), and `seq` and
    `ts` close the object, as `_JOURNAL_TAIL` expects."""
    body = event.__pydantic_serializer__.to_json(event)
    return b'%s,"seq":%d,"ts":%d}' % (body[:-1], seq, ts)


def encode_command(command: Command) -> bytes:
    return orjson.dumps(command.to_wire())


def decode_command(raw: bytes | str) -> dict[str, Any]:
    return _load_object(raw)
