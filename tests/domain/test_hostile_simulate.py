"""The simulator over hostile lines: it never raises, and every line is either folded or refused (hypothesis)."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain import limits
from domain.simulation import Simulator

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A small valid cluster the hostile lines land in, so accepted extremes meet each other.
BASE: list[dict[str, Any]] = [
    {"type": "ClusterConfigured", "ts": 0, "heartbeat_timeout_s": 30, "tick_ms": 1000},
    {"type": "QueueConfigured", "ts": 0, "queue": "q", "resources": {"gpu": {"quota": 4}}},
    {"type": "NodeHeartbeat", "ts": 0, "node": "n", "capacity": {"gpu": 8, "cpu": 8000}},
    {"type": "JobSubmitted", "ts": 1000, "job": "j", "queue": "q", "duration_s": 5},
]

# One valid example of every event type; hostile lines are these with parts replaced.
TEMPLATES: list[dict[str, Any]] = [
    {
        "type": "QueueConfigured",
        "queue": "q2",
        "parent": "q",
        "priority": 0,
        "resources": {
            "gpu": {"quota": 1, "limit": -1, "over_quota_weight": 1},
            "cpu": {"quota": 1000, "limit": 0},
            "memory": {"quota": -1},
        },
        "policy": {"kind": "balance", "balance_timeout_s": 300, "aging_interval_s": 600},
        "preemption": {
            "self_level": {"high_priority": [7, 9], "low_priority": [1, 3], "modules": ["DLC"]},
            "child_level": {"priority": 5, "modules": ["DSW"]},
            "within_queue": True,
        },
    },
    {"type": "QueueDeleted", "queue": "q2"},
    {
        "type": "ClusterConfigured",
        "heartbeat_timeout_s": 30,
        "placement": "spread",
        "consolidation": True,
        "tick_ms": 1000,
    },
    {
        "type": "JobSubmitted",
        "job": "k",
        "queue": "q",
        "priority": 5,
        "module": "DLC",
        "interactive": False,
        "preemptible": True,
        "tasks": 2,
        "min_tasks": 1,
        "resources": {"gpu": 0.5, "cpu": 1000, "memory": 1000},
        "node_selector": {"zone": "a"},
        "labels": {"image": "x"},
        "user": "u",
        "duration_s": 10,
    },
    {"type": "JobCancelled", "job": "j"},
    {
        "type": "NodeHeartbeat",
        "node": "m",
        "capacity": {"gpu": 8, "cpu": 64000, "memory": 512000},
        "labels": {"zone": "a"},
        "instance": "agent-1",
        "incarnation": 1,
        "running": [{"job": "j", "attempt": 1}],
    },
    {"type": "JobStarted", "job": "j", "node": "n", "attempt": 1},
    {"type": "JobFinished", "job": "j", "node": "n", "attempt": 1, "outcome": "failed"},
    {"type": "JobPreempted", "job": "j", "node": "n", "attempt": 1},
    {"type": "Tick"},
]

EXTREMES: list[Any] = [
    0,
    -1,
    0.0005,
    -0.0,
    5e-324,
    1e20,
    1e306,
    1e308,
    -1e308,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    2**70,
    -(2**63) - 1,
    limits.GPU_MAX,
    limits.GPU_MAX + 1,
    limits.CPU_MAX,
    limits.MEMORY_MAX,
    limits.TASKS_MAX,
    limits.DURATION_S_MAX,
    limits.TS_MAX,
    limits.TS_MAX + 1,
    limits.ATTEMPT_MAX,
    limits.QUEUE_AMOUNT_MAX["gpu"],
    limits.QUEUE_AMOUNT_MAX["memory"] + 1,
    limits.TICK_MS_MIN,
    limits.TICK_MS_MAX,
]

numbers = st.one_of(
    st.sampled_from(EXTREMES),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
)
strings = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "\x00", "\ufeff", "q", "n", "j", "DLC", "fifo", "succeeded"]),
    st.integers(0, 3 * limits.INPUT_BYTES_MAX).map(lambda n: "x" * n),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strings, inner, max_size=4),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


def _set(target: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


@st.composite
def mutated_events(draw: st.DrawFn) -> bytes:
    """A valid event with a ts, then a few of its parts replaced by extreme or foreign values."""
    event = copy.deepcopy(draw(st.sampled_from(TEMPLATES)))
    event["ts"] = draw(st.one_of(st.integers(1000, 10_000), st.sampled_from(EXTREMES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(event)
        path = draw(st.sampled_from(paths))
        _set(event, path, draw(st.one_of(numbers, values)))
    if draw(st.booleans()):
        event.pop(draw(st.sampled_from(sorted(event))), None)
    # json, not orjson: it writes integers beyond 64 bits as the digits a hostile producer sends.
    return json.dumps(event).encode()


raw_lines = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(
        [
            b'{"type": "Tick", "ts": NaN}',
            b'{"type": "Tick", "ts": Infinity}',
            b'{"type": "NodeHeartbeat", "ts": 5, "node": "n", "capacity": {"gpu": 1e400}}',
            b'{"type": "JobSubmitted", "ts": 5, "job": "\\ud800", "queue": "q"}',
            b"[" * 5000 + b"]" * 5000,
            b'{"a":' * 3000 + b"1" + b"}" * 3000,
            b"\xff\xfe\x00\x01",
            b'{"type": "Tick", "ts": 5}' * 2,
        ]
    ),
    st.integers(0, 4 * limits.LINE_BYTES_MAX).map(lambda n: b"\x01" * n),
)

hostile_lines = st.one_of(mutated_events(), raw_lines)


def simulate(lines: list[bytes]) -> tuple[Simulator, list[dict[str, Any]]]:
    simulator = Simulator()
    output = list(simulator.run(lines))
    for item in output:
        orjson.dumps(item)  # what `quotaflow simulate` prints: must always encode
    return simulator, output


def counted(lines: list[bytes]) -> int:
    return sum(1 for line in lines if line.decode("utf-8", "replace").strip())


@PROPERTY
@given(st.lists(hostile_lines, min_size=1, max_size=6), st.integers(0, len(BASE)))
@example([b'{"type": "Tick", "ts": 18446744073709551615}'], 0)
@example([b'{"type":"JobSubmitted","ts":1000,"job":"k","queue":"q","duration_s":1e306}'], 4)
def test_every_hostile_line_is_folded_or_refused_and_the_run_never_raises(
    hostile: list[bytes], where: int
) -> None:
    # Given a small cluster, when hostile lines arrive anywhere among its events,
    lines = [orjson.dumps(line) for line in BASE]
    lines[where:where] = hostile
    simulator, output = simulate(lines)
    # then every line was either folded or refused, and every refusal is short.
    rejected = [item for item in output if item["type"] == "Rejected"]
    assert simulator.accepted + len(rejected) == counted(lines)
    for item in rejected:
        assert len(item["reason"]) <= limits.REASON_CHARS_MAX + 40
        assert len(item["input"]) <= limits.REJECTED_INPUT_CHARS_MAX + 40


def test_the_issue_s_huge_numbers_are_refused_with_the_field_and_its_limit() -> None:
    # Given a cluster, when each line from the issue arrives,
    lines = [orjson.dumps(line) for line in BASE]
    hostile = {
        b'{"type":"QueueConfigured","ts":2000,"queue":"big","resources":{"gpu":{"limit":1e308}}}': (
            "resources.gpu.limit",
            str(limits.QUEUE_AMOUNT_MAX["gpu"]),
        ),
        b'{"type":"NodeHeartbeat","ts":2000,"node":"big","capacity":{"gpu":1e308}}': (
            "capacity.gpu",
            str(limits.GPU_MAX),
        ),
        b'{"type":"JobSubmitted","ts":2000,"job":"big","queue":"q","resources":{"gpu":1e308}}': (
            "resources.gpu",
            str(limits.GPU_MAX),
        ),
        b'{"type":"JobSubmitted","ts":2000,"job":"long","queue":"q","duration_s":1e306}': (
            "duration_s",
            str(limits.DURATION_S_MAX),
        ),
        b'{"type":"Tick","ts":18446744073709551615}': ("ts", str(limits.TS_MAX)),
    }
    _, output = simulate([*lines, *hostile])
    # then each is refused, naming the field and the limit, and the valid job still ran.
    reasons = {
        item["input"].encode(): item["reason"] for item in output if item["type"] == "Rejected"
    }
    assert set(reasons) == set(hostile)
    for line, words in hostile.items():
        for word in words:
            assert word in reasons[line], (line, reasons[line])
    assert any(item["type"] == "Dispatch" and item["job"] == "j" for item in output)


def test_a_line_over_the_size_limit_is_refused_with_a_short_echo() -> None:
    # Given a cluster, when a 200 KB line of 0x01 bytes arrives,
    lines = [orjson.dumps(line) for line in BASE]
    _, output = simulate([*lines, b"\x01" * 200_000])
    # then it is refused by its size, and the echo of it is a short prefix.
    rejected = [item for item in output if item["type"] == "Rejected"]
    assert len(rejected) == 1
    assert "over the limit for one line" in rejected[0]["reason"]
    assert str(limits.LINE_BYTES_MAX) in rejected[0]["reason"]
    assert len(rejected[0]["input"]) < limits.REJECTED_INPUT_CHARS_MAX + 40
