"""No preemption loop through a chain: fairness does not take back, via a third job, what an
explicit rule gave (contract §6, docs/preemption.md)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from domain.reasons import ReasonKind
from domain.simulation import Simulator
from tests.domain.harness import Cluster, event, node
from tests.domain.harness import job as submitted
from tests.domain.test_preemption_properties import queue_line


def queue(name: str, parent: str | None, quota: int, **preemption: Any) -> dict[str, Any]:
    return queue_line(name, parent, quota, {"within_queue": False, **preemption})


def job(
    name: str, queue: str, priority: int, module: str, gpu: float, **fields: Any
) -> dict[str, Any]:
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


# Found by the snapshot properties (explore profile): fair shares are whole devices, so p's
# own quarter GPU, within its unlimited deserved quota, gets a fair share of 0 (p-y's 15.75
# has the larger remainder). "big" (p-y) took the GPU by fair share, "small" (p's own jobs)
# took it back by deserved quota, and so on every second, for ever.
ROUNDING = [
    {"type": "QueueConfigured", "ts": 0, "queue": "p", "resources": {"gpu": {"quota": -1}}},
    {
        "type": "QueueConfigured",
        "ts": 0,
        "queue": "p-y",
        "parent": "p",
        "resources": {"gpu": {"quota": 1, "limit": -1}},
    },
    {"type": "NodeHeartbeat", "ts": 0, "node": "n0", "capacity": {"gpu": 8}},
    {"type": "NodeHeartbeat", "ts": 0, "node": "n1", "capacity": {"gpu": 8}},
    {**job("small", "p", 1, "EAS", 0.25), "duration_s": 15},
    {**job("big", "p-y", 1, "EAS", 4, tasks=4), "ts": 1000, "duration_s": 19},
]


def run_to_the_end(lines: list[dict[str, Any]], most: int = 1000) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in Simulator().run(orjson.dumps(line) for line in lines):
        out.append(line)
        assert len(out) <= most, "the simulation does not end"
    return out


def test_whole_device_shares_do_not_start_a_reclaim_ping_pong() -> None:
    # given the running quarter GPU and the 16-GPU job that only fits where it runs
    # when both run to the end
    out = run_to_the_end(ROUNDING)
    # then nobody is stopped: big waits for small, which keeps its deserved quota
    assert [o for o in out if o["type"] == "Preempt"] == []
    starts = {o["job"]: o["ts"] for o in out if o["type"] == "Dispatch"}
    assert starts == {"small": 0, "big": 15000}


def test_a_job_does_not_take_what_its_victim_would_take_right_back() -> None:
    # given the same two jobs, big first: p-y uses 16 GPUs, over its deserved 1
    big_first = [*ROUNDING[:4], {**ROUNDING[5], "ts": 0}, {**ROUNDING[4], "ts": 1000}]
    # when both run to the end
    out = run_to_the_end(big_first)
    # then small does not reclaim: once it ran, big (within its fair share of 16) could
    # reclaim from it right back (contract section 6: no preemption cycles); small waits
    assert [o for o in out if o["type"] == "Preempt"] == []
    starts = {o["job"]: o["ts"] for o in out if o["type"] == "Dispatch"}
    assert starts == {"big": 0, "small": 19000}


def test_a_job_kept_from_taking_back_says_why() -> None:
    # given big running on all 16 GPUs (p-y, deserved 1)
    cluster = Cluster()
    cluster.given(
        0,
        event("QueueConfigured", queue="p", resources={"gpu": {"quota": -1}}),
        event(
            "QueueConfigured",
            queue="p-y",
            parent="p",
            resources={"gpu": {"quota": 1, "limit": -1}},
        ),
        node("n0", gpu=8),
        node("n1", gpu=8),
    )
    cluster.given(0, submitted("big", "p-y", gpu=4, tasks=4))
    cluster.agents_obey()
    # when p's quarter GPU comes
    cluster.when(1000, submitted("small", "p", gpu=0.25))
    # then it waits, and its reason names the take-back, not a lack of victims
    assert cluster.last == []
    kind, facts = cluster.why("small")
    assert (kind, facts["stopped"]) == (ReasonKind.RECLAIM, ("p-y=takes_back",))
    assert "reclaim did not help: p-y: takes_back" in str(cluster.reason("small"))


def test_reclaim_with_moves_does_not_take_what_its_victim_could_take_right_back() -> None:
    # given small (p's own quarter GPU, fair share 0) alone on the pool-b node, and r's job
    # on a pool-a node that could move to a late 1-GPU node: big fits only by stopping small
    # and moving r's job (reclaim with moves)
    pool = {"a": {"pool": "a"}, "b": {"pool": "b"}}
    lines = [
        {"type": "ClusterConfigured", "ts": 0, "placement": "binpack", "consolidation": True},
        *ROUNDING[:2],
        {**ROUNDING[1], "queue": "r", "parent": "p"},
        {**ROUNDING[2], "labels": pool["b"]},
        {**ROUNDING[3], "labels": pool["a"]},
        {**ROUNDING[4], "node_selector": pool["b"]},
        {**job("mover", "r", 1, "EAS", 1), "duration_s": 30, "node_selector": pool["a"]},
        {
            "type": "NodeHeartbeat",
            "ts": 1000,
            "node": "n2",
            "capacity": {"gpu": 1},
            "labels": pool["a"],
        },
        {**job("big", "p-y", 1, "EAS", 8, tasks=2), "ts": 2000, "duration_s": 19},
    ]
    # when it runs to the end
    out = run_to_the_end(lines)
    # then small is not stopped (it could reclaim from big right back, by deserved quota):
    # big starts when small ends, after r's job moved for it
    assert [o["job"] for o in out if o["type"] == "Preempt"] == ["mover"]
    starts = {(o["job"], o["attempt"]): o["ts"] for o in out if o["type"] == "Dispatch"}
    assert starts[("big", 1)] == 15000 and ("small", 2) not in starts


def test_a_take_back_the_rule_would_refuse_as_a_whole_does_not_block_a_reclaim() -> None:
    # given an oversubscribed tree (quotas 5 + 4 on 8 GPUs): q0b runs 3 GPUs (deserved 2,
    # fair share 2), q1 its 4, and q0a (deserved 3, fair share 2) wants 3 in one task
    def configured(name: str, quota: int, parent: str | None = None) -> dict[str, Any]:
        gpu = {"quota": quota, "limit": 4 if name == "q1" else -1}
        return {"type": "QueueConfigured", "ts": 0, "queue": name, "parent": parent,
                "resources": {"gpu": gpu}}  # fmt: skip

    lines = [
        {"type": "NodeHeartbeat", "ts": 0, "node": "n0", "capacity": {"gpu": 8}},
        configured("q0", 5),
        configured("q0a", 3, "q0"),
        configured("q0b", 2, "q0"),
        configured("q1", 4),
        *({**job(f"b{i}", "q0b", 1, "EAS", 1), "ts": 1000} for i in range(3)),
        *({**job(f"c{i}", "q1", 1, "EAS", 1), "ts": 2000} for i in range(4)),
        {**job("a", "q0a", 1, "EAS", 3), "ts": 3000},
    ]
    # when it runs to the end
    out = run_to_the_end(lines)
    # then q0a reclaims by deserved quota: once it runs, q0b's jobs may not take it back
    # (each is admitted against it, but stopping it would leave q0a below its fair share)
    preempts = [(o["job"][0], o["by"], o["ts"]) for o in out if o["type"] == "Preempt"]
    assert preempts == [("b", "a", 3000)] * 2
    assert {o["ts"] for o in out if o["type"] == "Dispatch" and o["job"] == "a"} == {3000}


def test_reclaim_with_moves_kept_from_taking_back_says_why() -> None:
    # given the moves scenario above, stepped: small on the pool-b node, r's job on pool a,
    # and a late 1-GPU pool-a node r's job could move to
    pool_a, pool_b = {"pool": "a"}, {"pool": "b"}
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="binpack", consolidation=True),
        event("QueueConfigured", queue="p", resources={"gpu": {"quota": -1}}),
        *(
            event("QueueConfigured", queue=child, parent="p", resources=ROUNDING[1]["resources"])
            for child in ("p-y", "r")
        ),
        node("n0", gpu=8, labels=pool_b),
        node("n1", gpu=8, labels=pool_a),
    )
    cluster.given(
        0,
        submitted("small", "p", gpu=0.25, node_selector=pool_b),
        submitted("mover", "r", gpu=1, node_selector=pool_a),
    )
    cluster.agents_obey()
    cluster.given(1000, node("n2", gpu=1, labels=pool_a))
    # when big comes, which fits only by stopping small and moving r's job
    cluster.when(2000, submitted("big", "p-y", gpu=8, tasks=2))
    # then nothing is issued, and big's reason names the take-back
    assert cluster.last == []
    assert cluster.why("big")[1]["stopped"] == ("p=takes_back", "r=within_share")


# Found by the shortcut properties: 16 GPUs, a deserving 12 and b 5. At ts 5000 a's j7 (a
# 4-GPU gang) reclaims from b by deserved quota; b's j4 reclaims a's j9; j9 takes j7 by
# priority within a, b's j1 runs over quota on the room left over, and j7 reclaims again:
# each step allowed on its own, and the simulator's agent (stops at once) looped at one ts.
def a_job(name: str, queue: str, ts: int, priority: int, gpu: int, **fields: Any) -> dict[str, Any]:
    return {**job(name, queue, priority, "EAS", gpu, **fields), "ts": ts}


WITHIN_A_QUEUE = [
    {"type": "ClusterConfigured", "ts": 0, "placement": "binpack", "consolidation": True},
    queue_line("a", None, 12, {"within_queue": True}),
    queue_line("b", None, 5, {"within_queue": False}),
    {"type": "NodeHeartbeat", "ts": 0, "node": "n0", "capacity": {"gpu": 4}},
    {"type": "NodeHeartbeat", "ts": 0, "node": "n1", "capacity": {"gpu": 4}},
    {"type": "NodeHeartbeat", "ts": 0, "node": "n2", "capacity": {"gpu": 8}},
    a_job("j0", "a", 0, 1, 1, duration_s=5, preemptible=False),
    a_job("j1", "b", 0, 1, 2, duration_s=6),
    a_job("j2", "a", 2000, 1, 2, tasks=2, duration_s=4, preemptible=False),
    a_job("j3", "b", 4000, 1, 1, duration_s=1, preemptible=False),
    a_job("j4", "b", 4000, 2, 2, duration_s=2),
    a_job("j5", "a", 4000, 1, 3, duration_s=2, preemptible=False),
    a_job("j6", "a", 4000, 1, 1, duration_s=1, preemptible=False),
    a_job("j7", "a", 4000, 1, 2, tasks=2, duration_s=1),
    a_job("j8", "b", 4000, 2, 2, duration_s=2),
    a_job("j9", "a", 4000, 2, 1, duration_s=2),
]


def test_fairness_does_not_take_back_through_a_chain_a_priority_preemption_started() -> None:
    # given the two queues at ts 4000; when they run to the end (they did not end before)
    out = run_to_the_end(WITHIN_A_QUEUE)
    # then once j9 took j7 by priority and j7 reclaimed from j4, j4 does not take j9 again
    preempts = [(o["job"], o["reason"], o["by"]) for o in out if o["type"] == "Preempt"]
    took_j7 = preempts.index(("j7", "priority", "j9"))
    took_j4 = preempts.index(("j4", "reclaim", "j7"), took_j7)
    assert ("j9", "reclaim", "j4") not in preempts[took_j4:]
    # ... so no job is stopped more than twice at one ts, and every job runs
    stops = Counter((o["ts"], o["job"]) for o in out if o["type"] == "Preempt")
    assert max(stops.values()) <= 2, stops
    dispatched = {o["job"] for o in out if o["type"] == "Dispatch"}
    assert dispatched == {f"j{index}" for index in range(10)}
