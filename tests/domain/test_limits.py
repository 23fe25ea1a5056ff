"""Limits on input: what is refused, how the reason reads, and that the largest accepted values still encode (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import limits
from domain.codec import DecodeError, decode_ingress, decode_timed, encode_command
from domain.decider import accept, apply, close_group, initial_state
from domain.events import Event
from tests.domain.test_hostile_simulate import simulate

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
        assert accept(state, event) is None
        apply(state, event, seq, limits.TS_MAX)
    state, commands = close_group(state)
    # then the gang is dispatched, and every command encodes within the record limit.
    assert sorted(c.node for c in commands) == ["n0", "n1", "n2"]
    for command in commands:
        assert len(encode_command(command)) < limits.RECORD_BYTES_MAX


def _edge(low: int, high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([low, high]), st.integers(low, high))


amounts = st.fixed_dictionaries(
    {
        "gpu": _edge(0, limits.GPU_MAX),
        "cpu": _edge(0, limits.CPU_MAX),
        "memory": _edge(0, limits.MEMORY_MAX),
    }
)


capacities = st.fixed_dictionaries(
    {
        "gpu": st.one_of(st.just(limits.GPU_MAX), st.integers(0, limits.GPU_MAX)),
        "cpu": st.one_of(st.just(limits.CPU_MAX), st.integers(0, limits.CPU_MAX)),
        "memory": st.one_of(st.just(limits.MEMORY_MAX), st.integers(0, limits.MEMORY_MAX)),
    }
)


def _queue_amount(resource: str) -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from([-1, limits.QUEUE_AMOUNT_MAX[resource]]),
        _edge(0, limits.QUEUE_AMOUNT_MAX[resource]),
    )


@st.composite
def extreme_valid_events(draw: st.DrawFn) -> dict[str, Any]:
    """Events every field of which is valid, drawn towards the limits."""
    kind = draw(st.sampled_from(["queue", "node", "job", "cluster", "tick"]))
    if kind == "queue":
        resources = {
            name: {
                "quota": draw(_queue_amount(name)),
                "limit": draw(_queue_amount(name)),
                "over_quota_weight": draw(_edge(0, limits.OVER_QUOTA_WEIGHT_MAX)),
            }
            for name in ("gpu", "cpu", "memory")
        }
        priority = draw(_edge(-limits.QUEUE_PRIORITY_MAX, limits.QUEUE_PRIORITY_MAX))
        return {
            "type": "QueueConfigured",
            "queue": draw(st.sampled_from(["q", "r"])),
            "priority": priority,
            "resources": resources,
            "policy": {
                "kind": draw(st.sampled_from(["fifo", "round_robin", "balance", "intelligent"])),
                "balance_timeout_s": draw(_edge(0, limits.DURATION_S_MAX)),
                "aging_interval_s": draw(_edge(1, limits.DURATION_S_MAX)),
            },
        }
    if kind == "node":
        return {
            "type": "NodeHeartbeat",
            "node": draw(st.sampled_from("nmo")),
            "capacity": draw(capacities),
        }
    if kind == "job":
        tasks = draw(st.one_of(st.integers(1, 4), st.just(limits.TASKS_MAX)))
        return {
            "type": "JobSubmitted",
            "job": f"x{draw(st.integers(0, 9))}",
            "queue": draw(st.sampled_from(["q", "r"])),
            "tasks": tasks,
            "min_tasks": draw(st.integers(1, tasks)),
            "resources": draw(amounts),
            "duration_s": draw(_edge(0, limits.DURATION_S_MAX)),
        }
    if kind == "cluster":
        return {
            "type": "ClusterConfigured",
            "heartbeat_timeout_s": draw(_edge(1, limits.DURATION_S_MAX)),
            "tick_ms": draw(_edge(limits.TICK_MS_MIN, limits.TICK_MS_MAX)),
        }
    return {"type": "Tick"}


ORDER = {"QueueConfigured": 0, "ClusterConfigured": 1, "NodeHeartbeat": 2}
_UNLIMITED = {name: {"quota": -1, "limit": -1} for name in ("gpu", "cpu", "memory")}
_LARGEST = {"gpu": limits.GPU_MAX, "cpu": limits.CPU_MAX, "memory": limits.MEMORY_MAX}
EXTREME_SETUP = [
    orjson.dumps({"type": "QueueConfigured", "ts": 0, "queue": name, "resources": _UNLIMITED})
    for name in ("q", "r")
] + [orjson.dumps({"type": "NodeHeartbeat", "ts": 0, "node": "n", "capacity": _LARGEST})]
stamps = st.one_of(st.just(0), _edge(0, limits.TS_MAX))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(extreme_valid_events(), stamps), min_size=3, max_size=12))
def test_accepted_values_at_their_limits_never_break_the_core_or_its_output(
    stamped: list[tuple[dict[str, Any], int]],
) -> None:
    # Given events at the limits in time order (queues and nodes first within a ts), when
    # simulated, then nothing raises and every command prints (int64, finite numbers).
    stamped.sort(key=lambda item: (item[1], ORDER.get(item[0]["type"], 3)))
    lines = [*EXTREME_SETUP, *(orjson.dumps({**event, "ts": ts}) for event, ts in stamped)]
    simulator, output = simulate(lines)
    rejected = [item for item in output if item["type"] == "Rejected"]
    assert simulator.accepted + len(rejected) == len(lines)
