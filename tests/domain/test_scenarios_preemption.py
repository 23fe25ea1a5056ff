"""The preemption scenarios in tests/scenarios/preempt_*.jsonl, run through the simulator (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from domain.simulation import simulate_lines

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

Row = tuple[str, int, str | None, str | None, int | None, str | None]

# (type, ts, job, node, attempt, reason) of every output line, in emission order;
# tests/scenarios/README.md tells each story.
EXPECTED: dict[str, list[Row]] = {
    "preempt_self_level": [
        ("Dispatch", 1000, "b-dlc-5", "n1", 1, "quota"),
        ("Dispatch", 1000, "b-dlc-4", "n1", 1, "quota"),
        ("Dispatch", 1000, "b-dsw-4", "n1", 1, "quota"),
        ("Dispatch", 1000, "b-eas-4", "n1", 1, "quota"),
        ("Preempt", 6000, "b-dlc-4", "n1", 1, "self_level"),
        ("Preempt", 6000, "b-dsw-4", "n1", 1, "self_level"),
        ("Dispatch", 6000, "a-urgent", "n1", 1, "over_quota"),
        ("Dispatch", 16000, "b-dlc-4", "n1", 2, "quota"),
        ("Dispatch", 16000, "b-dsw-4", "n1", 2, "quota"),
    ],
    "preempt_child_level": [
        ("Dispatch", 1000, "x-dlc-2", "n1", 1, "quota"),
        ("Dispatch", 1000, "y-dlc-4", "n1", 1, "quota"),
        ("Dispatch", 1000, "x-eas-2", "n1", 1, "quota"),
        ("Dispatch", 1000, "y-dsw-3", "n1", 1, "quota"),
        ("Preempt", 5000, "x-dlc-2", "n1", 1, "child_level"),
        ("Preempt", 5000, "y-dsw-3", "n1", 1, "child_level"),
        ("Dispatch", 5000, "org-job", "n1", 1, "over_quota"),
        ("Dispatch", 25000, "x-dlc-2", "n1", 2, "quota"),
        ("Dispatch", 25000, "y-dsw-3", "n1", 2, "quota"),
    ],
    "preempt_invalid_rule": [
        ("Rejected", 0, None, None, None, None),
        ("Rejected", 1000, None, None, None, None),
        ("Dispatch", 1000, "to-good", "n1", 1, "quota"),
    ],
    "preempt_consolidation": [
        ("Dispatch", 1000, "long-1", "n1", 1, "quota"),
        ("Dispatch", 1000, "short-1", "n1", 1, "quota"),
        ("Dispatch", 1000, "long-2", "n2", 1, "quota"),
        ("Dispatch", 1000, "short-2", "n2", 1, "quota"),
        ("Dispatch", 5000, "long-1", "n2", 2, "consolidation"),  # new place first
        ("Preempt", 5000, "long-1", "n1", 1, "consolidation"),
        ("Dispatch", 5000, "whole-node", "n1", 1, "quota"),
    ],
    "preempt_elastic": [
        ("Dispatch", 1000, "elastic", "n1", 1, "quota"),  # 2 tasks: 8 and 4 do not fit
        ("Dispatch", 5000, "elastic", "n1", 1, "expand"),  # 2 -> 4
        ("Dispatch", 5000, "elastic", "n2", 1, "expand"),
        ("Dispatch", 5000, "elastic", "n2", 1, "expand"),  # 4 -> 8
    ],
    "preempt_priority": [
        ("Dispatch", 1000, "sweep", "n1", 1, "quota"),
        ("Dispatch", 1000, "pinned", "n1", 1, "quota"),
        ("Preempt", 3000, "sweep", "n1", 1, "priority"),
        ("Dispatch", 3000, "deadline", "n1", 1, "quota"),
        ("Dispatch", 13000, "sweep", "n1", 2, "quota"),
        ("Dispatch", 101000, "peer", "n1", 1, "quota"),
    ],
}


def run(name: str) -> list[dict[str, Any]]:
    lines = (SCENARIOS / f"{name}.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in simulate_lines(lines)]


def row(item: dict[str, Any]) -> Row:
    return (
        str(item["type"]),
        int(item["ts"]),
        item.get("job"),
        item.get("node"),
        item.get("attempt"),
        item.get("reason") if item["type"] != "Rejected" else None,
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preemption_scenario_output(name: str) -> None:
    assert [row(item) for item in run(name)] == EXPECTED[name]


def test_preemptions_name_their_preemptor() -> None:
    for name in ("preempt_self_level", "preempt_child_level", "preempt_priority"):
        for item in run(name):
            if item["type"] == "Preempt":
                assert item["by"] in {"a-urgent", "org-job", "deadline"}


def test_the_invalid_rule_is_rejected_with_its_reason() -> None:
    rejected = [item for item in run("preempt_invalid_rule") if item["type"] == "Rejected"]
    assert "must lie entirely below high_priority" in str(rejected[0]["reason"])
    assert rejected[1]["reason"] == "queue 'bad' does not exist"


def test_every_preempt_scenario_file_has_a_test_and_a_readme_entry() -> None:
    files = sorted(path.stem for path in SCENARIOS.glob("preempt_*.jsonl"))
    assert files == sorted(EXPECTED)
    readme = (SCENARIOS / "README.md").read_text()
    for name in files:
        assert f"### {name}.jsonl" in readme
