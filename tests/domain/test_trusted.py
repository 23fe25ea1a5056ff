"""Models the core builds without validating again, and commands read off as wire dicts (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from domain.commands import Dispatch, Preempt, Rejected
from domain.events import JobFinished, JobStarted, JobSubmitted
from domain.simulation import simulate_lines
from domain.trusted import Trusted

FULL_DISPATCH: dict[str, Any] = {
    "job": "j1",
    "node": "n1",
    "tasks": 2,
    "resources": {"gpu": 0.5, "cpu": 1000, "memory": 2048},
    "attempt": 3,
    "seq": 17,
    "ts": 5000,
    "reason": "over_quota",
    "duration_s": 30.0,
    "labels": {"command": "train.py"},
    "user": "ana",
    "incarnation": 2,
    "devices": [[0], [0]],
    "gpu_fraction": 0.5,
    "preempt_grace_s": 30,
}
PLAIN_DISPATCH = {name: FULL_DISPATCH[name] for name in list(FULL_DISPATCH)[:8]}


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (Dispatch, FULL_DISPATCH),
        (Dispatch, PLAIN_DISPATCH),
        (Preempt, {"job": "j", "node": "n", "tasks": 1, "attempt": 1, "seq": 2, "ts": 3,
                   "reason": "reclaim", "by": "k"}),
        (Preempt, {"job": "j", "node": "n", "tasks": 1, "attempt": 1, "seq": 2, "ts": 3,
                   "reason": "shrink"}),
        (JobStarted, {"job": "j", "node": "n", "attempt": 1}),
        (JobFinished, {"job": "j", "node": "n", "attempt": 1, "outcome": "failed"}),
    ],
)  # fmt: skip
def test_a_trusted_build_is_the_validated_model(model: Any, values: dict[str, Any]) -> None:
    validated = model(**values)
    trusted = Trusted(model)(**values)
    assert trusted == validated
    assert list(trusted.__dict__) == list(validated.__dict__)  # every field, in order
    assert trusted.model_fields_set == validated.model_fields_set
    assert trusted.model_dump_json() == validated.model_dump_json()
    with pytest.raises(Exception, match="frozen"):
        trusted.job = "other"


def test_a_trusted_build_names_what_is_missing_or_unknown() -> None:
    make = Trusted(Dispatch)
    with pytest.raises(TypeError, match=r"missing fields \['attempt'"):
        make(job="j", node="n")
    with pytest.raises(TypeError, match=r"unknown fields \['gpus'\]"):
        make(**PLAIN_DISPATCH, gpus=1)


def test_a_model_with_validators_of_its_own_is_not_built_trusted() -> None:
    with pytest.raises(TypeError, match="validators"):
        Trusted(JobSubmitted)


@pytest.mark.parametrize(
    ("command", "dumped"),
    [
        (Dispatch(**FULL_DISPATCH), Dispatch(**FULL_DISPATCH).model_dump(mode="json")),
        (
            Dispatch(**PLAIN_DISPATCH),
            Dispatch(**PLAIN_DISPATCH).model_dump(mode="json", exclude_none=True),
        ),
        (
            Preempt(job="j", node="n", tasks=1, attempt=1, seq=2, ts=3, reason="shrink"),
            Preempt(job="j", node="n", tasks=1, attempt=1, seq=2, ts=3, reason="shrink").model_dump(
                mode="json"
            ),
        ),
        (Rejected(ts=1, input="{}", reason="type: missing"), None),
    ],
)
def test_a_commands_wire_dict_is_pydantics_json_dump(
    command: Dispatch | Preempt | Rejected, dumped: dict[str, Any] | None
) -> None:
    expected = dumped if dumped is not None else command.model_dump(mode="json")
    wire = command.to_wire()
    assert list(wire.items()) == list(expected.items())  # the same keys in the same order
    assert orjson.dumps(wire) == orjson.dumps(expected)


def test_the_simulators_commands_validate_to_the_same_bytes() -> None:
    lines = [
        b'{"type":"ClusterConfigured","ts":0,"preempt_grace_s":20}',
        b'{"type":"QueueConfigured","ts":0,"queue":"q","resources":{"gpu":{"quota":4}}}',
        b'{"type":"NodeHeartbeat","ts":0,"node":"n1","capacity":{"gpu":4,"cpu":8,"memory":64},'
        b'"instance":"a","incarnation":1}',
        b'{"type":"JobSubmitted","ts":1000,"job":"half","queue":"q","duration_s":5,'
        b'"labels":{"command":"x"},"user":"ana","resources":{"gpu":0.5}}',
        b'{"type":"JobSubmitted","ts":1000,"job":"two","queue":"q","tasks":2,"resources":{"gpu":1}}',
    ]
    outputs = [orjson.loads(line) for line in simulate_lines(lines)]
    assert [(o["type"], o["job"]) for o in outputs] == [("Dispatch", "half"), ("Dispatch", "two")]
    for output in outputs:
        wire = orjson.dumps(output)
        again = Dispatch.model_validate_json(wire)
        assert orjson.dumps(again.to_wire()) == wire
    assert outputs[0]["duration_s"] == 5.0 and isinstance(outputs[0]["duration_s"], float)
    assert outputs[0]["incarnation"] == 1 and outputs[0]["preempt_grace_s"] == 20


def test_every_reason_the_core_stops_for_is_on_the_wire() -> None:
    # Preempts are built without validation, so a registered rule's reason (or the core's
    # own) outside the contract's PreemptReason would reach agents unchecked.
    from typing import get_args

    from domain.commands import PreemptReason
    from domain.plugins import DEFAULT_PLUGINS
    from domain.reasons import CORE_STOP_REASONS

    on_the_wire = set(get_args(PreemptReason))
    assert {rule.reason for rule in DEFAULT_PLUGINS.preemption_rules} <= on_the_wire
    assert set(CORE_STOP_REASONS) <= on_the_wire
