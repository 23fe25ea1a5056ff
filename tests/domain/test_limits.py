"""Limits on input: what is refused, how the reason reads, and that the largest accepted values still encode (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from domain import limits
from domain.codec import DecodeError, decode_ingress, decode_timed, encode_command
from domain.decider import admit, apply, close_group, initial_state
from domain.events import Event

JOBS = "quotaflow.jobs"


def refusal(topic: str, value: dict[str, Any] | bytes) -> str:
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    with pytest.raises(DecodeError) as caught:
        decode_ingress(topic, raw)
    return str(caught.value)


def job(**fields: Any) -> dict[str, Any]:
    return {"type": "JobSubmitted", "job": "j", "queue": "q", **fields}


@pytest.mark.parametrize(
    ("topic", "value", "words"),
    [
        (JOBS, job(resources={"gpu": limits.GPU_MAX + 1}), ("resources.gpu", "10000")),
        (JOBS, job(resources={"cpu": limits.CPU_MAX + 1}), ("resources.cpu", str(limits.CPU_MAX))),
        (JOBS, job(resources={"memory": 2**64 - 1}), ("resources.memory", str(limits.MEMORY_MAX))),
        (JOBS, job(tasks=limits.TASKS_MAX + 1), ("tasks", str(limits.TASKS_MAX))),
        (JOBS, job(min_tasks=2**40, tasks=2), ("min_tasks", str(limits.TASKS_MAX))),
        (JOBS, job(duration_s=1e306), ("duration_s", str(limits.DURATION_S_MAX))),
        (JOBS, job(labels={"k": "v" * 5000}), ("labels.k", str(limits.LABEL_VALUE_CHARS_MAX))),
        (JOBS, job(labels={f"k{i}": "v" for i in range(65)}), ("labels", "64")),
        (JOBS, job(user="u" * 300), ("user", "253")),
        (JOBS, job(job="j" * 300), ("job", "253")),
        (
            "quotaflow.nodes",
            {"type": "JobStarted", "job": "j", "node": "n", "attempt": 2**63},
            ("attempt", str(limits.ATTEMPT_MAX)),
        ),
        (
            "quotaflow.nodes",
            {"type": "NodeHeartbeat", "node": "n", "capacity": {"gpu": 1e20}},
            ("capacity.gpu", "10000"),
        ),
        (
            "quotaflow.admin",
            {"type": "QueueConfigured", "queue": "q", "resources": {"gpu": {"limit": 1e308}}},
            ("resources.gpu.limit", str(limits.QUEUE_AMOUNT_MAX["gpu"])),
        ),
        (
            "quotaflow.admin",
            {"type": "QueueConfigured", "queue": "q", "priority": 10**7},
            ("priority", str(limits.QUEUE_PRIORITY_MAX)),
        ),
        (
            "quotaflow.admin",
            {
                "type": "QueueConfigured",
                "queue": "q",
                "resources": {"cpu": {"quota": 1, "over_quota_weight": 1e300}},
            },
            ("over_quota_weight", str(limits.OVER_QUOTA_WEIGHT_MAX)),
        ),
        (
            "quotaflow.admin",
            {"type": "ClusterConfigured", "tick_ms": limits.TICK_MS_MAX + 1},
            ("tick_ms", str(limits.TICK_MS_MAX)),
        ),
        (
            "quotaflow.admin",
            {"type": "ClusterConfigured", "heartbeat_timeout_s": 2**62},
            ("heartbeat_timeout_s", str(limits.DURATION_S_MAX)),
        ),
    ],
)
def test_a_value_beyond_its_limit_is_refused_naming_the_field_and_the_limit(
    topic: str, value: dict[str, Any], words: tuple[str, ...]
) -> None:
    reason = refusal(topic, value)
    for word in words:
        assert word in reason, reason


def test_an_input_over_the_size_limit_is_refused_before_it_is_parsed() -> None:
    # Not JSON at all: only the size check can be what refuses it.
    reason = refusal(JOBS, b"\x01" * (limits.INPUT_BYTES_MAX + 1))
    assert reason == (
        f"input: {limits.INPUT_BYTES_MAX + 1} bytes, over the limit of "
        f"{limits.INPUT_BYTES_MAX} bytes"
    )


def test_a_reason_quotes_only_a_prefix_of_any_input_value() -> None:
    long_type = "T" * 50_000
    long_field = "f" * 50_000
    for value in ({"type": long_type}, job(**{long_field: 1})):
        reason = refusal(JOBS, value)
        assert len(reason) < 2 * limits.ECHO_CHARS_MAX + 200
        assert "(50000 characters)" in reason


def test_a_reason_names_a_few_bad_fields_and_counts_the_rest() -> None:
    reason = refusal(JOBS, job(**{f"extra{i}": i for i in range(100)}))
    assert reason.count("unknown field (") == limits.REASON_ERRORS_MAX
    assert f"and {100 - limits.REASON_ERRORS_MAX} more" in reason


def test_a_simulate_time_beyond_year_9999_is_refused() -> None:
    with pytest.raises(DecodeError, match=str(limits.TS_MAX)):
        decode_timed(orjson.dumps({"type": "Tick", "ts": limits.TS_MAX + 1}))
    ts, _ = decode_timed(orjson.dumps({"type": "Tick", "ts": limits.TS_MAX}))
    assert ts == limits.TS_MAX


def _event(value: dict[str, Any]) -> Event:
    _, event = decode_timed(orjson.dumps({**value, "ts": 0}))
    return event


def test_the_largest_accepted_amounts_still_make_encodable_commands() -> None:
    # Given queues and nodes at every limit, when a gang at the limits runs at the last ts,
    largest = {"gpu": limits.GPU_MAX, "cpu": limits.CPU_MAX, "memory": limits.MEMORY_MAX}
    queue_max = {name: {"quota": -1, "limit": -1} for name in largest}
    state = initial_state()
    events = [
        _event({"type": "QueueConfigured", "queue": "q", "resources": queue_max}),
        *(
            _event({"type": "NodeHeartbeat", "node": f"n{i}", "capacity": largest})
            for i in range(3)
        ),
        _event(
            {
                "type": "JobSubmitted",
                "job": "gang",
                "queue": "q",
                "tasks": 3,
                "resources": largest,
                "duration_s": limits.DURATION_S_MAX,
            }
        ),
    ]
    for seq, event in enumerate(events, start=1):
        assert admit(state, event) is None
        apply(state, event, seq, limits.TS_MAX)
    state, commands = close_group(state)
    # then the gang is dispatched, and every command encodes within the record limit.
    assert sorted(c.node for c in commands) == ["n0", "n1", "n2"]
    for command in commands:
        assert len(encode_command(command)) < limits.RECORD_BYTES_MAX
