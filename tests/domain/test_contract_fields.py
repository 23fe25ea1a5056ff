"""The contract's optional fields for devices, outcomes, time limits, retries and dependencies (pure)."""

from __future__ import annotations

import orjson
import pytest

from domain.codec import DecodeError, decode_ingress
from domain.commands import Dispatch, Preempt
from domain.events import ClusterConfigured, JobFinished, JobSubmitted, NodeHeartbeat
from domain.schema import json_schema


def _decode(topic: str, body: dict[str, object]) -> object:
    return decode_ingress(topic, orjson.dumps(body))


def test_job_submitted_takes_time_limit_retries_dependencies_and_grace() -> None:
    event = _decode(
        "quotaflow.jobs",
        {
            "type": "JobSubmitted",
            "job": "train",
            "queue": "a",
            "time_limit_s": 3600,
            "max_retries": 2,
            "after_ok": ["prep", "fetch"],
            "preempt_grace_s": 45,
        },
    )
    assert isinstance(event, JobSubmitted)
    assert (event.time_limit_s, event.max_retries, event.after_ok, event.preempt_grace_s) == (
        3600,
        2,
        ["prep", "fetch"],
        45,
    )


def test_the_new_job_fields_are_optional() -> None:
    event = _decode("quotaflow.jobs", {"type": "JobSubmitted", "job": "j", "queue": "a"})
    assert isinstance(event, JobSubmitted)
    assert (event.time_limit_s, event.max_retries, event.after_ok, event.preempt_grace_s) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"after_ok": ["j"]}, "cannot wait for itself"),
        ({"after_ok": ["a", "a"]}, "named twice"),
        ({"time_limit_s": 0}, "time_limit_s"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_bad_job_fields_are_refused_with_a_reason(fields: dict[str, object], says: str) -> None:
    with pytest.raises(DecodeError, match=says):
        _decode("quotaflow.jobs", {"type": "JobSubmitted", "job": "j", "queue": "a", **fields})


def test_a_heartbeat_lists_the_nodes_devices() -> None:
    event = _decode(
        "quotaflow.nodes",
        {
            "type": "NodeHeartbeat",
            "node": "n",
            "capacity": {"gpu": 2},
            "devices": [{"index": 0, "model": "a100", "memory": 80000}, {"index": 1}],
        },
    )
    assert isinstance(event, NodeHeartbeat)
    assert event.devices is not None
    assert [(d.index, d.model, d.memory) for d in event.devices] == [
        (0, "a100", 80000),
        (1, None, None),
    ]


@pytest.mark.parametrize(
    ("devices", "says"),
    [
        ([{"index": 0}, {"index": 0}], "listed twice"),
        ([{"index": 0}], "must agree"),
    ],
)
def test_inconsistent_devices_are_refused(devices: list[dict[str, int]], says: str) -> None:
    with pytest.raises(DecodeError, match=says):
        _decode(
            "quotaflow.nodes",
            {"type": "NodeHeartbeat", "node": "n", "capacity": {"gpu": 2}, "devices": devices},
        )


def test_job_finished_carries_an_exit_code_and_a_short_reason() -> None:
    event = _decode(
        "quotaflow.nodes",
        {
            "type": "JobFinished",
            "job": "j",
            "node": "n",
            "attempt": 1,
            "outcome": "failed",
            "exit_code": 137,
            "reason": "SIGKILL",
        },
    )
    assert isinstance(event, JobFinished)
    assert (event.exit_code, event.reason) == (137, "SIGKILL")
    with pytest.raises(DecodeError, match="reason"):
        _decode(
            "quotaflow.nodes",
            {"type": "JobFinished", "job": "j", "node": "n", "attempt": 1, "outcome": "failed"}
            | {"reason": "x" * 65},
        )


def test_cluster_configured_has_a_default_grace_period() -> None:
    event = _decode("quotaflow.admin", {"type": "ClusterConfigured", "preempt_grace_s": 20})
    assert isinstance(event, ClusterConfigured)
    assert event.preempt_grace_s == 20


def test_dispatch_writes_devices_and_grace_only_when_set() -> None:
    base = {
        "job": "j",
        "node": "n",
        "tasks": 2,
        "resources": {"gpu": 1},
        "attempt": 1,
        "seq": 3,
        "ts": 4,
        "reason": "quota",
    }
    assert "devices" not in Dispatch.model_validate(base).to_wire()
    wire = Dispatch.model_validate(base | {"devices": [[0], [1]], "preempt_grace_s": 30}).to_wire()
    assert (wire["devices"], wire["preempt_grace_s"]) == ([[0], [1]], 30)
    assert "gpu_fraction" not in wire
    stop = Preempt(job="j", node="n", tasks=1, attempt=1, seq=5, ts=6, reason="time_limit")
    assert stop.to_wire()["reason"] == "time_limit"


def test_the_schema_describes_the_new_fields() -> None:
    defs = json_schema()["$defs"]
    for model, fields in {
        "JobSubmitted": ("time_limit_s", "max_retries", "after_ok", "preempt_grace_s"),
        "NodeHeartbeat": ("devices",),
        "JobFinished": ("exit_code", "reason"),
        "ClusterConfigured": ("preempt_grace_s",),
        "Dispatch": ("devices", "gpu_fraction", "preempt_grace_s"),
    }.items():
        for field in fields:
            assert field in defs[model]["properties"], (model, field)
            assert field not in defs[model].get("required", []), (model, field)
    assert "time_limit" in str(defs["Preempt"]["properties"]["reason"])
