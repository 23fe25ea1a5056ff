"""The complete victim search and the deserved-quota fallback: the issue's situations."""

from __future__ import annotations

import uuid

from domain.commands import NodeCommand
from domain.events import Event
from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, event, job, node


def gpu_queue(name: str, quota: float, **fields: object) -> Event:
    return event(
        "QueueConfigured", queue=name, resources={"gpu": {"quota": quota, "limit": -1}}, **fields
    )


def settle(cluster: Cluster, ts: int, rounds: int = 10) -> list[NodeCommand]:
    """Agents answer every command, one cycle after another, for a few cycles at most."""
    seen: list[NodeCommand] = []
    for _ in range(rounds):
        if not cluster.last:
            break
        seen += cluster.last
        cluster.agents_obey(ts)
    assert not cluster.last, "the scheduler did not settle within a few cycles"
    return seen


def gpus(cluster: Cluster, name: str) -> float:
    return cluster.queue_view(name).subtree_allocated.gpu / 1000


def preempted(commands: list[NodeCommand]) -> list[tuple[str, str]]:
    return [(c.job, c.reason) for c in commands if c.type == "Preempt"]


def every_queue_has_its_guarantee(cluster: Cluster) -> None:
    """Every queue holds at least min(deserved quota, demand) in GPUs, and no job was
    preempted by one that it had preempted (no preemption cycles)."""
    for queue_id in cluster.queue_ids():
        queue = cluster.state.queues[queue_id]
        want = min(queue.quota.quota[0], queue.demand.gpu)
        assert queue.subtree_allocated.gpu >= want, (queue_id, queue.subtree_allocated.gpu, want)
    pairs = {(c.job, c.by) for c in cluster.commands if c.type == "Preempt" and c.by}
    assert not {(by, victim) for victim, by in pairs} & pairs


def test_a_multi_gpu_job_reclaims_one_node_of_one_gpu_jobs_with_unordered_ids() -> None:
    """400 one-GPU jobs j0..j399 fill 50 nodes; an 8-GPU job of the other queue takes the
    eight jobs of one node back, whatever order the ids sort in."""
    cluster = Cluster()
    nodes = [node(f"n{i}", gpu=8) for i in range(50)]
    cluster.given(0, gpu_queue("q0", 200), gpu_queue("q1", 200), *nodes)
    cluster.given(1, *[job(f"j{i}", "q0") for i in range(400)])
    settle(cluster, 1)
    assert gpus(cluster, "q0") == 400
    cluster.when(2, job("big", "q1", gpu=8))
    issued = settle(cluster, 2)
    victims = preempted(issued)
    assert len(victims) == 8 and {r for _, r in victims} == {"reclaim"}
    assert len({c.node for c in issued if c.type == "Preempt"}) == 1
    assert cluster.job_view("big").status == "running"
    assert (gpus(cluster, "q0"), gpus(cluster, "q1")) == (392, 8)
    every_queue_has_its_guarantee(cluster)
    assert cluster.when(3, event("Tick")) == []


def test_a_multi_gpu_job_reclaims_one_node_of_jobs_with_uuid_ids() -> None:
    """The same with the CLI's default ids (UUIDs, in no order related to the nodes)."""
    cluster = Cluster()
    nodes = [node(f"n{i}", gpu=8) for i in range(50)]
    cluster.given(0, gpu_queue("q0", 200), gpu_queue("q1", 200), *nodes)
    ids = [str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % 2**128)) for i in range(400)]
    cluster.given(1, *[job(name, "q0") for name in ids])
    settle(cluster, 1)
    cluster.when(2, job(str(uuid.UUID(int=7)), "q1", gpu=8))
    issued = settle(cluster, 2)
    assert len(preempted(issued)) == 8
    assert len({c.node for c in issued if c.type == "Preempt"}) == 1
    assert (gpus(cluster, "q0"), gpus(cluster, "q1")) == (392, 8)
    every_queue_has_its_guarantee(cluster)
    assert cluster.when(3, event("Tick")) == []


def test_a_victim_that_would_take_its_queue_below_fair_share_is_skipped_not_the_end() -> None:
    """b runs 1 GPU and, started later, 2 GPUs (b = 3 of 2 deserved); a runs 1 and wants 1
    more: the newer 2-GPU job is forbidden (b would fall to 1), the 1-GPU one is taken."""
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, job("b-small", "b"), job("a0", "a"))
    settle(cluster, 1)
    cluster.given(2, job("b-big", "b", gpu=2))
    settle(cluster, 2)
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (1, 3)
    cluster.when(3, job("a1", "a"))
    issued = settle(cluster, 3)
    assert preempted(issued) == [("b-small", "reclaim")]
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (2, 2)
    every_queue_has_its_guarantee(cluster)
    # Settled: nothing more happens, no preemption back and forth.
    assert cluster.when(4, event("Tick")) == []


def test_an_oversubscribed_cluster_falls_back_to_deserved_quotas() -> None:
    """Quotas 4 + 4 + 4 on 8 GPUs. a runs two 4-GPU jobs; b and c each want one. Fair shares
    are 3, 3 and 2 whole GPUs, so no 4-GPU job fits a fair share: the fallback lets one of
    them take a 4-GPU job from a (above its deserved 4, and not below it after); then nobody
    is above a deserved quota, and the other waits, told why."""
    cluster = Cluster()
    cluster.given(
        0, gpu_queue("a", 4), gpu_queue("b", 4), gpu_queue("c", 4), node("n1", 4), node("n2", 4)
    )
    cluster.given(1, job("a0", "a", gpu=4), job("a1", "a", gpu=4))
    settle(cluster, 1)
    cluster.when(2, job("b0", "b", gpu=4), job("c0", "c", gpu=4))
    issued = settle(cluster, 2)
    assert [r for _, r in preempted(issued)] == ["reclaim"]
    assert gpus(cluster, "a") == 4
    assert sorted([gpus(cluster, "b"), gpus(cluster, "c")]) == [0, 4]
    assert cluster.when(3, event("Tick")) == []


def test_oversubscribed_quotas_with_feasible_demand_end_at_deserved_quotas() -> None:
    """Quotas 6 + 6 on 8 GPUs; a runs 8 in 2-GPU jobs, b wants two 2-GPU jobs (fair shares
    5 and 3 whole GPUs): b gets the first by fair share, and stops there since a is then at
    its deserved 6; every queue ends at or above min(deserved, demand) where capacity allows."""
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 6), gpu_queue("b", 6), node("n1", 4), node("n2", 4))
    cluster.given(1, *[job(f"a{i}", "a", gpu=2) for i in range(4)])
    settle(cluster, 1)
    cluster.when(2, job("b0", "b", gpu=2))
    settle(cluster, 2)
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (6, 2)
    cluster.when(3, job("b1", "b", gpu=2))
    assert preempted(settle(cluster, 3)) == []
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (6, 2)


def test_an_oversubscribed_cluster_gives_every_queue_min_deserved_and_demand() -> None:
    """Quotas 4 + 6 + 6 on 8 GPUs (16 > 8). a runs eight 1-GPU jobs over two nodes (ids in
    no node order); b wants two 1-GPU jobs and c one 2-GPU job. Fair shares 4, 2 and 2: each
    takes its share back from a, c's two victims on one node; then nothing moves."""
    cluster = Cluster()
    cluster.given(
        0, gpu_queue("a", 4), gpu_queue("b", 6), gpu_queue("c", 6), node("n1", 4), node("n2", 4)
    )
    cluster.given(1, *[job(f"a{(i * 5) % 8}", "a") for i in range(8)])
    settle(cluster, 1)
    cluster.when(2, job("b0", "b"), job("b1", "b"), job("c0", "c", gpu=2))
    issued = settle(cluster, 2)
    assert [r for _, r in preempted(issued)] == ["reclaim"] * 4
    assert (gpus(cluster, "a"), gpus(cluster, "b"), gpus(cluster, "c")) == (4, 2, 2)
    every_queue_has_its_guarantee(cluster)
    assert cluster.when(3, event("Tick")) == []


def test_the_fallback_takes_a_whole_job_from_a_queue_above_its_deserved_quota() -> None:
    """a deserves 1 and waits; b deserves 3 and runs 2 + 2 on the only 4-GPU node. Every
    victim takes b below its fair share (3), so plain reclaim cannot; b is above its deserved
    quota, so the fallback takes one 2-GPU job: a ends with its 1, b with 2 (contract §6:
    even below its fair share), and nothing comes back."""
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1), gpu_queue("b", 3), node("n1", 4))
    cluster.given(1, job("b0", "b", gpu=2), job("b1", "b", gpu=2))
    settle(cluster, 1)
    cluster.when(2, job("a0", "a"))
    issued = settle(cluster, 2)
    assert [r for _, r in preempted(issued)] == ["reclaim"]
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (1, 2)
    # b is below min(3, 4) only by whole jobs: its 2-GPU job would take it to 4 > 3.
    assert cluster.job_view("b0").status == "pending" or cluster.job_view("b1").status == "pending"
    assert cluster.when(3, event("Tick")) == []


def test_reclaim_combines_stopping_a_job_with_moving_another() -> None:
    """Two 4-GPU nodes; a deserves 4 and runs 2 on n1 and 2 + 1 on n2 (a = 5); b deserves 4
    and submits a 4-GPU job. Reclaim a's 1-GPU job, move a's 2-GPU job to n1 (room free now,
    dispatched before its old tasks stop), and b's job goes on n2: 4 and 4."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", consolidation=True),
        gpu_queue("a", 4),
        gpu_queue("b", 4),
        node("n1", 4),
        node("n2", 4),
    )
    cluster.given(1, job("a1", "a", gpu=2), job("gone", "a", gpu=2))
    settle(cluster, 1)
    cluster.given(2, job("a2", "a", gpu=2))
    settle(cluster, 2)
    cluster.given(3, job("a3", "a", gpu=1))
    settle(cluster, 3)
    on = {c.job: c.node for c in cluster.commands if c.type == "Dispatch"}
    assert on == {"a1": "n1", "gone": "n1", "a2": "n2", "a3": "n2"}
    cluster.finish(4, "gone")
    assert gpus(cluster, "a") == 5
    cluster.when(10, job("big", "b", gpu=4))
    assert [(c.type, c.job, c.node, c.reason) for c in cluster.last] == [
        ("Dispatch", "a2", "n1", "consolidation"),  # its new place before anything stops
        ("Preempt", "a2", "n2", "consolidation"),
        ("Preempt", "a3", "n2", "reclaim"),
    ]
    settle(cluster, 10)
    assert cluster.job_view("big").placements == (("n2", 1),)
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (4, 4)
    every_queue_has_its_guarantee(cluster)
    assert cluster.when(11, event("Tick")) == []


def test_explain_says_why_reclaim_did_not_help() -> None:
    """a (1 deserved) waits with nothing; b (4 deserved, fair share 3 of the 5 GPUs) runs
    2 + 2: any victim takes b below its fair share, and b is not above its deserved quota (no
    fallback); c runs non-preemptible work within its quota."""
    cluster = Cluster()
    cluster.given(
        0, gpu_queue("a", 1), gpu_queue("b", 4), gpu_queue("c", 1), node("n1", 4), node("n2", 1)
    )
    cluster.given(
        1, job("b0", "b", gpu=2), job("b1", "b", gpu=2), job("c0", "c", preemptible=False)
    )
    settle(cluster, 1)
    cluster.when(3, job("a1", "a"))
    assert preempted(settle(cluster, 3)) == []
    kind, facts = cluster.why("a1")
    assert kind is ReasonKind.RECLAIM
    assert facts["looked_at"] == ("b", "c")
    assert facts["stopped"] == ("b=insufficient", "c=within_share")
    assert "reclaim did not help: b: insufficient, c: within_share" in str(cluster.reason("a1"))


def test_a_job_blocked_before_another_queue_went_over_its_deserved_quota_reclaims_in_that_cycle() -> (
    None
):
    """One 8-GPU node, quotas 5 and 4 (oversubscribed). q0 runs 2 GPUs and its 3-GPU job j3
    is blocked (q1 at 4 is not above its deserved quota); q1 then submits a 1-GPU job, which
    allocation gives the idle GPU (work-conserving), taking q1 to 5 of 4. Allocation served q0
    first, so without a second look j3 would wait for ever: now the same cycle reclaims for it
    (not from j4, dispatched in that very cycle), and q0 reaches its deserved 5."""
    cluster = Cluster()
    cluster.given(0, node("n0", gpu=8), gpu_queue("q0", 5), gpu_queue("q1", 4))
    cluster.given(1, job("j0", "q1", gpu=1), job("j1", "q0", gpu=2))
    cluster.given(2, job("j2", "q1", gpu=3))
    cluster.given(3, job("j3", "q0", gpu=3))
    settle(cluster, 3)
    assert (gpus(cluster, "q0"), gpus(cluster, "q1")) == (2, 4)
    cluster.when(4, job("j4", "q1", gpu=1))
    issued = cluster.last
    assert [(c.type, c.job) for c in issued] == [("Dispatch", "j4"), ("Preempt", "j2")]
    assert preempted(issued) == [("j2", "reclaim")]
    settle(cluster, 4)
    assert (gpus(cluster, "q0"), gpus(cluster, "q1")) == (5, 2)
    every_queue_has_its_guarantee_or_capacity_ran_out(cluster)


def every_queue_has_its_guarantee_or_capacity_ran_out(cluster: Cluster) -> None:
    """Quotas 5 + 4 on 8 GPUs: q0 gets min(5, demand); q1 keeps what is left."""
    q0 = cluster.state.queues["q0"]
    assert q0.subtree_allocated.gpu >= min(q0.quota.quota[0], q0.demand.gpu)
    pairs = {(c.job, c.by) for c in cluster.commands if c.type == "Preempt" and c.by}
    assert not {(by, victim) for victim, by in pairs} & pairs
