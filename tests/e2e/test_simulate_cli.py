"""`quotaflow simulate` as a black box (the QuotaFlow contract §7): the real console script, no broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.simulation import Simulator
from tests.domain.test_hostile_simulate import counted, hostile_lines

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "scenarios" / "skeleton.jsonl"


def quotaflow() -> list[str]:
    """The installed console script next to this interpreter, else the module."""
    script = Path(sys.executable).parent / "quotaflow"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli"]


def simulate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*quotaflow(), "simulate", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def lines(output: bytes) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in output.splitlines()]


def summary(items: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [
        (
            i["type"],
            i.get("job"),
            i.get("node"),
            i.get("reason"),
            i.get("attempt"),
            i.get("seq"),
            i["ts"],
        )
        for i in items
    ]


def test_skeleton_scenario_gives_the_expected_commands_in_order() -> None:
    result = simulate(str(SCENARIO))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    items = lines(result.stdout)
    rejected = [i for i in items if i["type"] == "Rejected"]
    assert summary([i for i in items if i["type"] != "Rejected"]) == [
        ("Dispatch", "a-train", "n1", "quota", 1, 7, 1000),
        ("Dispatch", "a-gang", "n1", "quota", 1, 7, 1000),  # the gang's 2 tasks on one node
        ("Dispatch", "a-burst", "n2", "over_quota", 1, 10, 2000),
        ("Preempt", "a-burst", "n2", "reclaim", 1, 12, 3000),  # team-b takes its quota back
        ("Dispatch", "b-big", "n2", "quota", 1, 13, 3000),
        ("Dispatch", "b-late", "n1", "over_quota", 1, 17, 6000),  # once a-gang has finished
    ]
    gang = next(i for i in items if i.get("job") == "a-gang")
    assert gang["tasks"] == 2
    assert gang["resources"] == {"gpu": 1, "cpu": 0, "memory": 0}
    preempt = next(i for i in items if i["type"] == "Preempt")
    assert preempt["by"] == "b-big"
    assert [(r["ts"], "team-c" in str(r["reason"])) for r in rejected] == [(4000, True)]
    assert orjson.loads(str(rejected[0]["input"]))["job"] == "nowhere"


def test_output_is_byte_identical_across_runs_and_stdin() -> None:
    first = simulate(str(SCENARIO))
    second = simulate(str(SCENARIO))
    piped = simulate("-", stdin=SCENARIO.read_bytes())
    assert first.returncode == second.returncode == piped.returncode == 0
    assert first.stdout  # not trivially equal
    assert first.stdout == second.stdout == piped.stdout


def test_unreadable_lines_become_rejections_and_the_run_goes_on() -> None:
    scenario = SCENARIO.read_bytes().splitlines()
    garbage = [
        b"{not json",
        b'{"type": "JobSubmitted", "ts": 1500, "job": "x", "queue": "team-a", "color": "red"}',
        b'{"type": "Teleported", "ts": 1500}',
        b"\xff\xfe not utf-8",
        b'["a", "list"]',
    ]
    # After the ts 1000 group, before the ts 2000 one.
    broken = [*scenario[:7], *garbage, *scenario[7:]]
    result = simulate("-", stdin=b"\n".join(broken) + b"\n")
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    items = lines(result.stdout)
    rejected = [i for i in items if i["type"] == "Rejected"]
    assert len(rejected) == len(garbage) + 1  # plus the scenario's own unknown queue
    assert [set(r) for r in rejected] == [{"type", "ts", "input", "reason"}] * len(rejected)
    assert "not valid JSON" in str(rejected[0]["reason"])
    assert "color" in str(rejected[1]["reason"])
    assert "Teleported" in str(rejected[2]["reason"])
    # The rest of the file was simulated exactly as without the garbage.
    clean = lines(simulate(str(SCENARIO)).stdout)
    assert [i for i in items if i["type"] != "Rejected"] == [
        i for i in clean if i["type"] != "Rejected"
    ]


def test_missing_file_is_one_line_error() -> None:
    result = simulate("tests/scenarios/no-such-file.jsonl")
    assert result.returncode != 0
    assert result.stdout == b""
    assert result.stderr.decode().count("\n") == 1
    assert "no such file" in result.stderr.decode()


HOSTILE = [
    b'{"type":"QueueConfigured","ts":1500,"queue":"huge","resources":{"gpu":{"limit":1e308}}}',
    b'{"type":"NodeHeartbeat","ts":1500,"node":"huge","capacity":{"gpu":1e308}}',
    b'{"type":"JobSubmitted","ts":1500,"job":"huge","queue":"team-a","resources":{"gpu":1e308}}',
    b'{"type":"JobSubmitted","ts":1500,"job":"long","queue":"team-a","duration_s":1e306}',
    b'{"type":"Tick","ts":18446744073709551615}',
    b'{"type":"Tick","ts":NaN}',
    b'{"type":"NodeHeartbeat","ts":1500,"node":"inf","capacity":{"gpu":Infinity}}',
    b'{"type":"NodeHeartbeat","ts":1500,"node":"e400","capacity":{"gpu":1e400}}',
    b"[" * 100_000 + b"]" * 100_000,
    b"\x01" * 200_000,
    b'{"type":"' + b"T" * 100_000 + b'","ts":1500}',
]


def test_hostile_lines_are_each_one_short_rejection_and_the_run_goes_on() -> None:
    scenario = SCENARIO.read_bytes().splitlines()
    # After the ts 1000 group, before the ts 2000 one.
    broken = [*scenario[:7], *HOSTILE, *scenario[7:]]
    result = simulate("-", stdin=b"\n".join(broken) + b"\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    assert max(len(line) for line in result.stdout.splitlines()) < 30_000
    items = lines(result.stdout)
    rejected = [i for i in items if i["type"] == "Rejected"]
    assert len(rejected) == len(HOSTILE) + 1  # plus the scenario's own unknown queue
    assert all(len(str(r["reason"])) < 1_100 for r in rejected)
    clean = lines(simulate(str(SCENARIO)).stdout)
    assert [i for i in items if i["type"] != "Rejected"] == [
        i for i in clean if i["type"] != "Rejected"
    ]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_lines, min_size=1, max_size=8))
def test_generated_hostile_files_exit_0_through_the_real_process(hostile: list[bytes]) -> None:
    data = b"\n".join(hostile) + b"\n"
    result = simulate("-", stdin=data)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == b""
    # The process prints exactly what the pure simulator gives for the same lines, and
    # there every line was either folded or refused.
    given_lines = data.split(b"\n")
    simulator = Simulator()
    expected = [orjson.dumps(item) for item in simulator.run(given_lines)]
    assert result.stdout.splitlines() == expected
    refused = sum(orjson.loads(line)["type"] == "Rejected" for line in expected)
    assert simulator.accepted + refused == counted(given_lines)
