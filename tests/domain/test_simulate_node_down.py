"""The simulator's NodeDown directive (contract section 7): a node fails, is lost, comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from domain.simulation import Simulator, decode_directive

SCENARIO = Path(__file__).parents[1] / "scenarios" / "sim_node_down.jsonl"


def run(lines: list[str]) -> tuple[Simulator, list[dict[str, Any]]]:
    simulator = Simulator()
    return simulator, list(simulator.run(lines))


def test_a_failed_node_is_lost_after_the_timeout_and_its_job_runs_elsewhere() -> None:
    simulator, out = run(SCENARIO.read_text().splitlines())
    dispatched = [(o["job"], o["node"], o["ts"]) for o in out if o["type"] == "Dispatch"]
    assert dispatched == [
        ("long", "n1", 1000),
        ("short", "n2", 1000),
        # n1 failed at 50 s and was declared lost 30 s after its last heartbeat; `long`
        # waited for `short` to finish at 101 s, then ran on n2.
        ("long", "n2", 101000),
        ("late", "n1", 900000),  # n1 came back with a heartbeat
    ]
    assert [o["reason"] for o in out if o["type"] == "Rejected"] == [
        "NodeDown: unknown node nowhere"
    ]
    assert not simulator.state.nodes["n1"].lost


def test_a_failed_node_without_a_heartbeat_stays_lost() -> None:
    lines = SCENARIO.read_text().splitlines()[:7]
    simulator, out = run(lines)
    assert simulator.state.nodes["n1"].lost
    assert [o["job"] for o in out if o["type"] == "Dispatch"] == ["long", "short", "long"]


def test_a_malformed_directive_is_refused_by_the_decoder_not_a_crash() -> None:
    assert decode_directive('{"type": "NodeDown", "ts": 5, "node": "n1"}') is not None
    for bad in ('{"type": "NodeDown", "ts": -1, "node": "n1"}', '{"type": "NodeDown", "ts": 1}'):
        assert decode_directive(bad) is None
        _, out = run([orjson.dumps({"type": "Tick", "ts": 0}).decode(), bad])
        assert [o["type"] for o in out] == ["Rejected"]
