"""The queue-policy scenarios in tests/scenarios/policy_*.jsonl, run through the simulator (pure)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from domain.simulation import simulate_lines

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

# (job, ts) of every Dispatch, in emission order; tests/scenarios/README.md tells each story.
EXPECTED = {
    "policy_fifo": [
        ("warmup", 1000),
        ("big", 61000),  # blocked at 2 s; the queue waits for it
        ("small", 61000),
        ("tiny", 61000),
    ],
    "policy_round_robin": [
        ("warmup", 1000),
        ("small", 3000),  # big is skipped
        ("tiny", 4000),
        ("big", 61000),
    ],
    "policy_balance": [
        ("warmup", 1000),
        # big blocks from 2 s; skipped at 22 s; then medium blocks from 22 s until 42 s.
        ("small", 42000),
        ("tiny", 42000),
        ("big", 61000),
        ("medium", 61000),
    ],
    "policy_intelligent": [
        ("warmup", 1000),
        ("eval", 3000),  # sweep (priority 3) is blocked and skipped
        ("critical", 101000),  # priority 8 was blocked and stopped the queue
        ("sweep", 101000),  # aged 3 -> 6: ahead of late-high (6) by submission order
        ("quick", 131000),
        ("late-high", 151000),
    ],
}


def run(name: str) -> list[dict[str, object]]:
    lines = (SCENARIOS / f"{name}.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in simulate_lines(lines)]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_policy_scenario_dispatches(name: str) -> None:
    output = run(name)
    assert [o for o in output if o["type"] == "Rejected"] == []
    assert [(o["job"], o["ts"]) for o in output if o["type"] == "Dispatch"] == EXPECTED[name]
    assert [o for o in output if o["type"] == "Preempt"] == []


def test_every_policy_scenario_file_has_a_test_and_a_readme_entry() -> None:
    files = sorted(path.stem for path in SCENARIOS.glob("policy_*.jsonl"))
    assert files == sorted(EXPECTED)
    readme = (SCENARIOS / "README.md").read_text()
    assert all(f"{name}.jsonl" in readme for name in files)
