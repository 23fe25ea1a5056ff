"""The codec's one-pass JSON validation agrees with orjson plus the event type's validation."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from domain import codec
from domain.codec import (
    INGRESS_TYPES,
    DecodeError,
    decode_ingress,
    decode_journal,
    encode_journal,
    encode_journaled,
    event_to_wire,
)
from domain.events import JobFinished, JobStarted, JournalRecord, NodeHeartbeat, NodesAlive
from domain.wire_types import ResourcesIn

FIELDS: dict[str, list[Any]] = {
    "job": ["j-1", "a", "", "x" * 300, "é", "j 1"],
    "queue": ["q", "team-a", "", "Q!"],
    "node": ["n1", "node-00001", "", "n/1"],
    "priority": [1, 5, 9, 0, 10, 5.0, "5", True, 10**30],
    "tasks": [1, 2, 0, 1.0, 10**6],
    "min_tasks": [1, 3, None],
    "attempt": [1, 2, 0, -1, 1.5, None],
    "outcome": ["succeeded", "failed", "ok"],
    "exit_code": [0, 1, -9, 1000, None, "1"],
    "resources": [
        {"gpu": 1, "cpu": 1000, "memory": 4000},
        {"gpu": 0.5},
        {"gpu": 1.0005},
        {"gpu": -1},
        {"cpu": 1.5},
        {"tpu": 1},
        {},
    ],
    "capacity": [{"gpu": 8, "cpu": 256000, "memory": 1024000}, {"gpu": 2.5}, {"gpu": "8"}],
    "labels": [{}, {"zone": "a"}, {"": "x"}, {"k": 1}, None],
    "duration_s": [1, 2.5, 0, -1, None, 1e308],
    "interactive": [True, False, 0],
    "preemptible": [True, False, None],
    "after_ok": [["a"], ["j-1"], ["b", "b"], [], None],
    "instance": ["host-1", "", None],
    "incarnation": [1, 2, None, 0],
    "running": [[{"job": "a", "attempt": 1}], [], None, [{"job": "a"}]],
    "heartbeat_timeout_s": [30, 0, 1.0],
    "tick_ms": [1000, 5, 10**7],
    "policy": [{"kind": "fifo"}, {"kind": "nope"}, {}],
    "seen": [{"n1": 5}, {"n1": -1}, {}],
    "parent": ["org", None, "q"],
    "seq": [1],
    "ts": [1],
    "extra": [1],
}


BASES: dict[str, dict[str, Any]] = {
    "JobSubmitted": {"job": "j-1", "queue": "q"},
    "JobCancelled": {"job": "j-1"},
    "NodeHeartbeat": {"node": "n1", "capacity": {"gpu": 8}},
    "JobStarted": {"job": "j-1", "node": "n1", "attempt": 1},
    "JobFinished": {"job": "j-1", "node": "n1", "attempt": 1, "outcome": "succeeded"},
    "JobPreempted": {"job": "j-1", "node": "n1", "attempt": 1},
    "QueueConfigured": {"queue": "q"},
    "QueueDeleted": {"queue": "q"},
    "ClusterConfigured": {},
}
TOPIC_OF = {cls.__name__: topic for topic, types in INGRESS_TYPES.items() for cls in types}


@st.composite
def inputs(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(sorted(BASES)))
    body: dict[str, Any] = {"type": kind, **BASES[kind]}
    for name in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=4, unique=True)):
        body[name] = draw(st.sampled_from(FIELDS[name]))
    if draw(st.booleans()):
        body.pop("type")
        body["type"] = kind  # the discriminator last rather than first
    raw = json.dumps(body, separators=(",", ":")).encode()  # integers of any size
    if draw(st.integers(0, 19)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]  # cut short
    topic = (
        TOPIC_OF[kind] if draw(st.integers(0, 9)) else draw(st.sampled_from(sorted(INGRESS_TYPES)))
    )
    return topic, raw


def _slow(topic: str, raw: bytes) -> object:
    try:
        return codec._validate(codec._load_object(raw), INGRESS_TYPES[topic])
    except DecodeError as exc:
        return f"refused: {exc}"


@settings(max_examples=400, deadline=None)
@given(inputs())
def test_an_input_the_fast_path_accepts_is_the_same_event_the_slow_path_gives(
    given_input: tuple[str, bytes],
) -> None:
    topic, raw = given_input
    fast = codec._fast_ingress(topic, raw)
    slow = _slow(topic, raw)
    if fast is None:
        return  # refused fast: decode_ingress gives the slow path's verdict and reason
    assert not isinstance(slow, str), (raw, slow)
    assert type(fast) is type(slow)
    assert event_to_wire(fast) == event_to_wire(slow)


@settings(max_examples=200, deadline=None)
@given(inputs())
def test_decode_ingress_refuses_with_the_slow_paths_reason(given_input: tuple[str, bytes]) -> None:
    topic, raw = given_input
    slow = _slow(topic, raw)
    try:
        verdict: object = decode_ingress(topic, raw)
    except DecodeError as exc:
        verdict = f"refused: {exc}"
    if isinstance(slow, str) or isinstance(verdict, str):
        seq_ts = "stamped by the scheduler" in str(verdict)
        assert verdict == slow or seq_ts, (raw, verdict, slow)
    else:
        assert event_to_wire(verdict) == event_to_wire(slow)  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(inputs(), st.integers(1, 2**53), st.integers(0, 253_402_300_799_999))
def test_a_journal_record_is_the_events_wire_dict_with_seq_and_ts_last(
    given_input: tuple[str, bytes], seq: int, ts: int
) -> None:
    topic, raw = given_input
    try:
        event = decode_ingress(topic, raw)
    except DecodeError:
        return
    expected = orjson.dumps({**event_to_wire(event), "seq": seq, "ts": ts})
    assert encode_journaled(event, seq, ts) == expected


def test_journal_records_decode_the_same_on_both_paths() -> None:
    records = [
        JournalRecord(seq=1, ts=0, event=NodeHeartbeat(node="n1", capacity=ResourcesIn(gpu=8))),
        JournalRecord(seq=22, ts=1_700_000_000_000, event=JobStarted(job="a", node="n", attempt=1)),
        JournalRecord(seq=3, ts=5, event=NodesAlive(seen={"n1": 4, "n2": 0})),
        JournalRecord(
            seq=4,
            ts=6,
            event=JobFinished(
                job="a", node="n", attempt=1, outcome="failed", reason=',"seq":1,"ts":2}'
            ),
        ),
    ]
    for record in records:
        raw = encode_journal(record)
        fast = codec._fast_journal(raw)
        assert fast is not None
        assert fast == record
        assert decode_journal(raw + b"\n") == record
        # Not in the canonical form (an older writer, a hand-written file): the slow path.
        reordered = orjson.dumps(
            {"seq": record.seq, "ts": record.ts, **event_to_wire(record.event)}
        )
        assert codec._fast_journal(reordered) is None
        assert decode_journal(reordered) == record
