"""The quota scenarios in tests/scenarios/quota_*.jsonl, run through the simulator (pure).

Each file tells one story of docs/quotas.md; the checks here say what must come out of it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from domain.simulation import simulate_lines

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def run(name: str) -> list[dict[str, Any]]:
    lines = (SCENARIOS / f"{name}.jsonl").read_bytes().splitlines()
    output = [orjson.loads(line) for line in simulate_lines(lines)]
    assert [o for o in output if o["type"] == "Rejected"] == []
    return output


def queue_of(name: str) -> dict[str, str]:
    lines = (SCENARIOS / f"{name}.jsonl").read_bytes().splitlines()
    return {
        record["job"]: record["queue"]
        for record in map(orjson.loads, lines)
        if record["type"] == "JobSubmitted"
    }


def running_at(output: list[dict[str, Any]], ts: int, queues: dict[str, str]) -> Counter[str]:
    """GPUs' worth of 1-GPU jobs running per queue once time `ts` is done (no finishes yet)."""
    running: Counter[str] = Counter()
    for o in output:
        if o["ts"] > ts:
            break
        if o["type"] == "Dispatch":
            running[queues[o["job"]]] += o["tasks"]
        elif o["type"] == "Preempt":
            running[queues[o["job"]]] -= o["tasks"]
    return running


def preempts(output: list[dict[str, Any]]) -> list[tuple[str, int, str, str | None]]:
    return [(o["job"], o["ts"], o["reason"], o["by"]) for o in output if o["type"] == "Preempt"]


def test_seed_002_spare_gpus_follow_quota_3_to_1() -> None:
    name = "quota_seed002_spare_by_quota"
    output = run(name)
    assert running_at(output, 1000, queue_of(name)) == Counter({"a": 9, "b": 3})
    assert preempts(output) == []


def test_late_queue_reclaims_its_fair_share() -> None:
    name = "quota_reclaim_fair_share"
    output, queues = run(name), queue_of(name)
    assert running_at(output, 1000, queues) == Counter({"b": 12})
    assert running_at(output, 2000, queues) == Counter({"a": 9, "b": 3})
    for victim, ts, reason, by in preempts(output):
        assert (queues[victim], ts, reason, queues[by or ""]) == ("b", 2000, "reclaim", "a")


def test_kai_burst_queue_is_reclaimed_first() -> None:
    name = "quota_burst_reclaimed_first"
    output, queues = run(name), queue_of(name)
    assert running_at(output, 1000, queues) == Counter({"burst": 4})
    assert running_at(output, 2000, queues) == Counter({"research": 2, "ml": 1, "burst": 1})
    assert {(queues[v], reason) for v, _, reason, _ in preempts(output)} == {("burst", "reclaim")}


def test_interactive_jobs_go_first_within_quota_preempting_their_queues_training() -> None:
    output = run("quota_interactive_first")
    assert preempts(output) == [
        ("train0", 2000, "interactive", "notebook"),
        ("train1", 2000, "interactive", "notebook2"),
    ]
    # notebook3 would take the queue's interactive work beyond its quota of 2: it waits.
    assert [(o["job"], o["ts"]) for o in output if o["type"] == "Dispatch"][2:5] == [
        ("notebook", 2000),
        ("notebook2", 2000),
        ("notebook3", 602000),
    ]


def test_a_parents_own_jobs_compete_as_one_more_child() -> None:
    name = "quota_parent_own_jobs"
    output = run(name)
    assert running_at(output, 1000, queue_of(name)) == Counter({"org": 1, "team": 3})


def test_two_queues_fed_new_jobs_never_ping_pong() -> None:
    """a runs idle GPUs beyond its share; b's arrivals take them back, never the other way."""
    name = "quota_no_ping_pong"
    output, queues = run(name), queue_of(name)
    directions = {(queues[by or ""], queues[victim]) for victim, _, _, by in preempts(output)}
    assert directions == {("b", "a")}
    displaced_by: dict[str, set[str]] = {}
    for victim, _, _, by in preempts(output):
        assert victim not in displaced_by.get(by or "", set()), "a job preempted its preemptor"
        displaced_by.setdefault(victim, set()).add(by or "")


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("quota_*.jsonl")), ids=lambda p: p.stem)
def test_every_quota_scenario_is_checked_here(path: Path) -> None:
    assert f'"{path.stem}"' in Path(__file__).read_text()
