"""One admission verdict per look-alike victim: the same victims as judging each alone (pure core)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.cycle import candidates
from domain.simulation import Simulator
from tests.domain.test_blocked_shapes import look_alike_backlogs, simulate
from tests.domain.test_preemption_properties import queue_line, scenarios

SELF_LEVEL = {"high_priority": [9, 9], "low_priority": [1, 5], "modules": ["EAS"]}
# Queue a (quota 2) and queue b (quota 0, whose priority-9 jobs may take a's priority 1-5
# jobs by its self-level rule), on one node of 2 GPUs.
A_AND_B_ON_TWO_GPUS = [
    {"type": "ClusterConfigured", "ts": 0},
    queue_line("a", None, 2, {"within_queue": False}),
    queue_line("b", None, 0, {"within_queue": False, "self_level": SELF_LEVEL}),
    {"type": "NodeHeartbeat", "ts": 0, "node": "n0", "capacity": {"gpu": 2}},
]


def job(name: str, queue: str, priority: int, ts: int) -> dict[str, Any]:
    return {
        "type": "JobSubmitted",
        "ts": ts,
        "job": name,
        "queue": queue,
        "priority": priority,
        "module": "EAS",
        "tasks": 1,
        "resources": {"gpu": 1},
        "duration_s": 100,
    }


def test_a_look_alike_of_the_job_that_displaced_it_may_still_be_reclaimed() -> None:
    # Given b's self-level rule: b-v1 displaced a-j and its look-alike b-v2 displaced a-x;
    # then b loses the rule, so a (below its quota) may reclaim from b (above its own)
    b_without_rule = queue_line("b", None, 0, {"within_queue": False}) | {"ts": 3000}
    lines = [
        *A_AND_B_ON_TWO_GPUS,
        job("a-j", "a", 1, 0),
        job("a-x", "a", 1, 0),
        job("b-v1", "b", 9, 1000),
        job("b-v2", "b", 9, 2000),
        b_without_rule,
    ]
    # When it runs
    out = list(Simulator().run(orjson.dumps(line) for line in lines))
    # Then a-j reclaims from b-v2, never from b-v1 that displaced it by an explicit rule,
    # although b-v1 is listed first and looks the same
    preempts = [(o["ts"], o["job"], o["reason"], o["by"]) for o in out if o["type"] == "Preempt"]
    assert (3000, "b-v2", "reclaim", "a-j") in preempts
    assert not [p for p in preempts if p[1] == "b-v1"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(look_alike_backlogs(), scenarios()))
def test_look_alike_victims_are_admitted_as_if_judged_one_by_one(
    lines: list[dict[str, Any]],
) -> None:
    shared = simulate(lines)
    with mock.patch.object(candidates, "look_alike", lambda victim, superiors: None):
        alone = simulate(lines)
    assert shared == alone


def test_victims_alike_but_for_priority_are_judged_apart() -> None:
    # Given b's self-level rule over priorities 1-5, and a's two running jobs that differ only
    # in priority: a-1 (priority 7, listed first) and a-2 (priority 2)
    lines = [
        *A_AND_B_ON_TWO_GPUS,
        job("a-1", "a", 7, 0),
        job("a-2", "a", 2, 0),
        job("b-v", "b", 9, 1000),
    ]
    # When b-v arrives with no room left
    out = list(Simulator().run(orjson.dumps(line) for line in lines))
    # Then it takes a-2, the one in the rule's range, although a-1 was judged first
    preempts = [(o["ts"], o["job"], o["reason"], o["by"]) for o in out if o["type"] == "Preempt"]
    assert preempts[0] == (1000, "a-2", "self_level", "b-v")
