"""The simulator's NodeDown directive (contract section 7): a node fails, is lost, comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# -- a failed node's deadline, kept without reading every node's ---------------------------


class EveryDeadlineRead(Simulator):
    """Checks, at each step of virtual time, the kept earliest deadline of a failed node
    against reading every deadline in the core's heap, as the simulator once did."""

    checked = 0

    def _first_down_deadline(self) -> int | None:
        kept = super()._first_down_deadline()
        read = [t for t, n in self.state.heartbeat_expiry if n in self._down]
        assert kept == (min(read) if read else None)
        EveryDeadlineRead.checked += 1
        return kept


NODES = ["n1", "n2", "n3"]

steps = st.lists(
    st.tuples(
        st.sampled_from(["down", "heartbeat", "job", "timeout", "tick"]),
        st.sampled_from(NODES),
        st.integers(min_value=1, max_value=20_000),  # ms later
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_the_kept_deadline_of_a_failed_node_is_the_earliest_in_the_core(script: Any) -> None:
    lines: list[dict[str, Any]] = [
        {"type": "ClusterConfigured", "ts": 0, "heartbeat_timeout_s": 5},
        {"type": "QueueConfigured", "ts": 0, "queue": "q", "resources": {"gpu": {"quota": 3}}},
        *({"type": "NodeHeartbeat", "ts": 0, "node": n, "capacity": {"gpu": 1}} for n in NODES),
    ]
    ts = 0
    for index, (kind, name, later) in enumerate(script):
        ts += later
        if kind == "down":
            lines.append({"type": "NodeDown", "ts": ts, "node": name})
        elif kind == "heartbeat":  # a node heard again, failed or not
            lines.append({"type": "NodeHeartbeat", "ts": ts, "node": name, "capacity": {"gpu": 1}})
        elif kind == "job":
            job = {"job": f"j{index}", "queue": "q", "duration_s": later // 1000 + 1}
            lines.append({"type": "JobSubmitted", "ts": ts, **job})
        elif kind == "timeout":  # the core makes every deadline anew
            timeout = 2 + later % 9
            lines.append({"type": "ClusterConfigured", "ts": ts, "heartbeat_timeout_s": timeout})
        else:
            lines.append({"type": "Tick", "ts": ts})
    simulator = EveryDeadlineRead()
    list(simulator.run(orjson.dumps(line) for line in lines))
    read = [t for t, n in simulator.state.heartbeat_expiry if n in simulator._down]
    assert simulator._first_down_deadline() == (min(read) if read else None)
