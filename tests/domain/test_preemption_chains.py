"""No preemption loop through a chain: fairness does not take back, via a third job, what an
explicit rule gave (contract §6, docs/preemption.md)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from domain.simulation import Simulator
from tests.domain.test_preemption_properties import queue_line


def queue(name: str, parent: str | None, quota: int, **preemption: Any) -> dict[str, Any]:
    return queue_line(name, parent, quota, {"within_queue": False, **preemption})


def job(name: str, queue: str, priority: int, module: str, gpu: float, **fields: Any) -> dict:
    return {
        "type": "JobSubmitted",
        "ts": 0,
        "job": name,
        "queue": queue,
        "priority": priority,
        "module": module,
        "interactive": False,
        "tasks": 1,
        "resources": {"gpu": gpu},
        "duration_s": 20,
        **fields,
    }


# Found by the preemption properties: q's self-level rule lets j7 take p's j1; j1 (p's own
# jobs) then reclaims from its sibling p-y's j13; j13 (p below its share at the top) reclaims
# from q's j7, which takes j1 again: each pair is allowed, the triangle looped for ever.
TRIANGLE = [
    {"type": "ClusterConfigured", "ts": 0, "placement": "spread", "consolidation": True},
    queue("p", None, -1),
    queue("p-y", "p", 4),
    queue(
        "q",
        None,
        5,
        self_level={"high_priority": [8, 9], "low_priority": [7, 7], "modules": ["EAS"]},
    ),
    {"type": "NodeHeartbeat", "ts": 0, "node": "n0", "capacity": {"gpu": 1}},
    job("j1", "p", 7, "EAS", 0.5, tasks=3),
    job("j2", "p-y", 7, "EAS", 0.5, tasks=3),
    job("j3", "p", 7, "DLC", 4),
    job("j7", "q", 9, "EAS", 1),
    job("j8", "q", 8, "DLC", 1, preemptible=False),
    job("j12", "q", 8, "DSW", 2, tasks=2, interactive=True),
    job("j13", "p-y", 4, "DLC", 0.5),
    {"type": "NodeHeartbeat", "ts": 12000, "node": "late", "capacity": {"gpu": 8}},
]


def test_a_reclaim_chain_does_not_take_back_what_a_self_level_rule_gave() -> None:
    # given the triangle; when it runs to the end (it did not end before)
    out = list(Simulator().run(orjson.dumps(line) for line in TRIANGLE))
    # then j13 reclaims from j7 only before j7 displaces j1 (whose reclaim displaced j13) ...
    preempts = [(o["job"], o["reason"], o["by"]) for o in out if o["type"] == "Preempt"]
    took_j1 = preempts.index(("j1", "self_level", "j7"))
    assert ("j7", "reclaim", "j13") not in preempts[took_j1:]
    # ... so no job is stopped again and again, and every job ends.
    stops = Counter((o["ts"], o["job"], o["attempt"]) for o in out if o["type"] == "Preempt")
    per_job = Counter((ts, name) for ts, name, _ in stops)
    assert max(per_job.values()) <= 2, per_job
    dispatched = {o["job"] for o in out if o["type"] == "Dispatch"}
    assert dispatched == {"j1", "j2", "j3", "j7", "j8", "j12", "j13"}
