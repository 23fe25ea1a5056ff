"""Reclaim and interactive preemption: guarantees restored, fairness kept, nobody ping-pongs."""

from __future__ import annotations

import dataclasses

import pytest

from domain import fairshare
from domain.commands import NodeCommand
from domain.cycle.session import Session
from domain.decider import apply
from domain.events import Event
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.reasons import ReasonKind
from domain.rules.reclaim import Reclaim
from tests.domain.harness import Cluster, event, job, node


def gpu_queue(name: str, quota: float, limit: float = -1, **fields: object) -> Event:
    return event(
        "QueueConfigured", queue=name, resources={"gpu": {"quota": quota, "limit": limit}}, **fields
    )


def settle(cluster: Cluster, ts: int) -> list[NodeCommand]:
    """Agents answer every command until the core has nothing more to say; returns them all."""
    seen: list[NodeCommand] = []
    while cluster.last:
        seen += cluster.last
        cluster.agents_obey(ts)
    return seen


def gpus(cluster: Cluster, name: str) -> float:
    return cluster.queue_view(name).subtree_allocated.gpu / 1000


def preempts(commands: list[NodeCommand]) -> list[tuple[str, str, str | None]]:
    return [(c.job, c.reason, c.by) for c in commands if c.type == "Preempt"]


def test_a_queue_below_its_deserved_quota_reclaims_from_one_above_its_fair_share() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, *[job(f"b{i}", "b") for i in range(6)])
    settle(cluster, 1)
    assert gpus(cluster, "b") == 4
    cluster.when(2, job("a0", "a"), job("a1", "a"))
    issued = settle(cluster, 2)
    assert {reason for _, reason, _ in preempts(issued)} == {"reclaim"}
    assert {by for _, _, by in preempts(issued)} == {"a0", "a1"}
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (2, 2)


@pytest.mark.parametrize(
    "plugins",
    [DEFAULT_PLUGINS, dataclasses.replace(DEFAULT_PLUGINS, resolvers=())],
    ids=["default", "no consolidation"],
)
def test_the_only_waiting_queue_reclaims_by_the_fair_shares_its_submission_changed(
    plugins: Plugins,
) -> None:
    """Nothing else waits, so no queue is ranked; the submission that makes a wait also
    lowers b's fair share from 4 to 2 in that very cycle, and reclaim judges b by 2, with
    or without consolidation looking at the shares first."""
    cluster = Cluster(plugins)
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, *[job(f"b{i}", "b") for i in range(4)])
    settle(cluster, 1)
    assert (gpus(cluster, "b"), cluster.queue_view("b").fair_share[0] / 1000) == (4, 4)
    issued = cluster.when(2, job("a0", "a"), job("a1", "a"))
    assert {(reason, by) for _, reason, by in preempts(issued)} == {
        ("reclaim", "a0"),
        ("reclaim", "a1"),
    }
    settle(cluster, 2)
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (2, 2)


def test_reclaim_stops_no_more_victims_than_the_jobs_need() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, *[job(f"b{i}", "b") for i in range(6)])
    settle(cluster, 1)
    cluster.when(2, job("a0", "a"), job("a1", "a"))
    assert len(preempts(settle(cluster, 2))) == 2


def test_seed_002_late_queue_reclaims_up_to_its_fair_share_of_9() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 3), gpu_queue("b", 1), node("n1", gpu=8), node("n2", gpu=4))
    cluster.given(1, *[job(f"b{i}", "b") for i in range(20)])
    settle(cluster, 1)
    cluster.when(2, *[job(f"a{i}", "a") for i in range(20)])
    settle(cluster, 2)
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (9, 3)


def test_reclaim_never_takes_a_victim_queue_below_its_fair_share() -> None:
    """b holds 4 in 2-GPU jobs with fair share 3: taking one would leave it at 2. b is at its
    deserved quota of 4 (quotas 1 + 4 on 4 GPUs), so the deserved-quota fallback does not
    apply either (tests/domain/test_victim_search.py has the case where it does)."""
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1), gpu_queue("b", 4), node("n1", gpu=4))
    cluster.given(1, job("b0", "b", gpu=2), job("b1", "b", gpu=2))
    settle(cluster, 1)
    cluster.when(2, job("a0", "a"))
    assert preempts(settle(cluster, 2)) == []
    assert cluster.job_view("a0").status == "pending"


def test_a_queue_at_its_fair_share_does_not_reclaim() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1), gpu_queue("b", 3), node("n1", gpu=4))
    cluster.given(1, job("a0", "a"), *[job(f"b{i}", "b") for i in range(3)])
    settle(cluster, 1)
    cluster.when(2, job("a1", "a"))
    assert preempts(settle(cluster, 2)) == []


def test_reclaim_stays_within_the_subtree_where_fairness_is_broken() -> None:
    """Under one parent at its fair share, a starved team reclaims from its sibling only."""
    cluster = Cluster()
    cluster.given(
        0,
        gpu_queue("org", 4),
        gpu_queue("t1", 2, parent="org"),
        gpu_queue("t2", 2, parent="org"),
        gpu_queue("other", 4),
        node("n1", gpu=8),
    )
    cluster.given(
        1, *[job(f"o{i}", "other") for i in range(4)], *[job(f"x{i}", "t1") for i in range(4)]
    )
    settle(cluster, 1)
    cluster.when(2, job("y0", "t2"), job("y1", "t2"))
    issued = settle(cluster, 2)
    victims = [victim for victim, _, _ in preempts(issued)]
    assert victims and all(v.startswith("x") for v in victims)
    assert (gpus(cluster, "t1"), gpus(cluster, "t2"), gpus(cluster, "other")) == (2, 2, 4)


def test_the_over_quota_burst_queue_is_reclaimed_before_anyone_within_quota() -> None:
    cluster = Cluster()
    cluster.given(
        0, gpu_queue("team", 2), gpu_queue("mid", 2), gpu_queue("burst", 0), node("n1", gpu=6)
    )
    cluster.given(1, job("m0", "mid"), job("m1", "mid"), *[job(f"u{i}", "burst") for i in range(4)])
    settle(cluster, 1)
    cluster.when(2, job("t0", "team"), job("t1", "team"))
    victims = [victim for victim, _, _ in preempts(settle(cluster, 2))]
    assert victims and all(v.startswith("u") for v in victims)
    assert (gpus(cluster, "team"), gpus(cluster, "mid"), gpus(cluster, "burst")) == (2, 2, 2)


def test_two_queues_fed_new_jobs_do_not_ping_pong() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, *[job(f"a{i}", "a", duration_s=1) for i in range(4)])
    settle(cluster, 1)
    cluster.when(2, *[job(f"b{i}", "b") for i in range(4)])
    first = preempts(settle(cluster, 2))
    assert first and all(victim.startswith("a") for victim, _, _ in first)
    later: list[tuple[str, str, str | None]] = []
    for round_ in range(3, 30):
        cluster.when(round_, job(f"a-{round_}", "a"), job(f"b-{round_}", "b"))
        later += preempts(settle(cluster, round_))
        running_a = [
            j for j in cluster.job_ids() if j.startswith("a") and cluster.job_view(j).placements
        ]
        cluster.finish(round_, running_a[0])
        later += preempts(settle(cluster, round_))
    assert later == []
    assert (gpus(cluster, "a"), gpus(cluster, "b")) == (2, 2)


def test_a_job_displaced_by_an_explicit_rule_does_not_reclaim_from_its_displacer() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, *[job(f"b{i}", "b") for i in range(4)])
    settle(cluster, 1)
    # Fold a0 without running a cycle, so it is pending while b holds everything.
    apply(cluster.state, job("a0", "a"), cluster.seq + 1, 2)
    fairshare.recompute(cluster.state)
    displaced = cluster.job("a0")
    session = Session(cluster.state, DEFAULT_PLUGINS, cluster.seq + 1, 2)
    rule = Reclaim()
    assert rule.admits(session, displaced, cluster.job("b3"))
    displaced.displaced_by["b3"] = "self_level"
    assert not rule.admits(session, displaced, cluster.job("b3"))
    assert rule.admits(session, displaced, cluster.job("b2"))


def test_interactive_job_preempts_its_own_queues_unattended_work_within_quota() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 4), node("n1", gpu=4))
    cluster.given(1, *[job(f"train{i}", "a") for i in range(4)])
    settle(cluster, 1)
    cluster.when(2, job("notebook", "a", interactive=True))
    issued = settle(cluster, 2)
    [(victim, reason, by)] = preempts(issued)
    assert (victim.startswith("train"), reason, by) == (True, "interactive", "notebook")
    assert cluster.job_view("notebook").placements


def test_interactive_jobs_go_before_unattended_ones_of_their_queue() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1), node("n1", gpu=1))
    cluster.when(1, job("train", "a"), job("notebook", "a", interactive=True))
    assert cluster.dispatched() == ["notebook"]


def test_interactive_beyond_deserved_quota_waits_and_preempts_nobody() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1), gpu_queue("b", 0), node("n1", gpu=4))
    cluster.given(1, job("i0", "a", interactive=True), *[job(f"b{i}", "b") for i in range(3)])
    settle(cluster, 1)
    cluster.when(2, job("i1", "a", interactive=True))
    assert preempts(settle(cluster, 2)) == []
    assert cluster.why("i1")[0] is ReasonKind.QUOTA


def test_interactive_and_non_preemptible_jobs_are_never_victims() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), gpu_queue("b", 2), node("n1", gpu=4))
    cluster.given(1, job("b-i", "b", interactive=True), job("b-np", "b", preemptible=False))
    cluster.given(1, job("a0", "a"), job("a1", "a"))
    settle(cluster, 1)
    cluster.when(2, job("b-more", "b"))
    cluster.when(3, job("a-i", "a", interactive=True), job("b-i2", "b", interactive=True))
    issued = settle(cluster, 3)
    victims = {victim for victim, _, _ in preempts(issued)}
    assert not victims & {"b-i", "b-np", "a-i", "b-i2"}


def test_two_notebooks_preempt_exactly_two_trainings() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 4), node("n1", gpu=4))
    cluster.given(1, *[job(f"train{i}", "a") for i in range(4)])
    settle(cluster, 1)
    cluster.when(2, job("nb1", "a", interactive=True), job("nb2", "a", interactive=True))
    assert len(preempts(settle(cluster, 2))) == 2


def test_interactive_job_is_dispatched_on_quota_even_beside_over_quota_training() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2), node("n1", gpu=8))
    cluster.when(1, *[job(f"train{i}", "a") for i in range(4)])  # 2 on quota, 2 beyond it
    assert [c.reason for c in cluster.last] == ["quota", "quota", "over_quota", "over_quota"]
    cluster.when(2, job("notebook", "a", interactive=True))
    assert [(c.job, c.reason) for c in cluster.last] == [("notebook", "quota")]


def test_two_reclaims_in_one_cycle_the_second_by_deserved_quota() -> None:
    # Given q1 (no quota) running 2 + 1 GPUs of a 4-GPU node, one GPU free,
    cluster = Cluster()
    queues = [gpu_queue(f"q{i}", 1 if i == 2 else 0) for i in range(3)]
    cluster.given(1, *queues, node("n0", gpu=4))
    cluster.at(2, job("j0", "q1", gpu=2))
    settle(cluster, 2)
    cluster.at(3, job("j1", "q1", gpu=1))
    settle(cluster, 3)
    # when q0 asks 2 GPUs and q2 its one deserved GPU in the same group,
    cluster.when(4, job("j2", "q0", gpu=2), job("j3", "q2", gpu=1))
    # then q0 (first by name among the equally deprived) takes the free GPU and q1's 1-GPU
    # job by fair share (q1 keeps 2, its share is 1), and q2 takes q1's last job by the
    # deserved-quota fallback: q1, above its deserved 0, ends below its fair share.
    assert preempts(cluster.last) == [("j1", "reclaim", "j2"), ("j0", "reclaim", "j3")]
    settle(cluster, 4)
    assert (gpus(cluster, "q0"), gpus(cluster, "q1"), gpus(cluster, "q2")) == (2, 0, 1)


def test_one_queue_reclaims_by_deserved_quota_then_by_fair_share_in_one_cycle() -> None:
    # Given q1 (deserved 2) running 1 + 2 GPUs, q3 (deserved 3) running 1, and q0 (nothing
    # deserved) running 1 + 1, on nodes of 1, 1 and 4 GPUs,
    cluster = Cluster()
    queues = [gpu_queue(f"q{i}", quota) for i, quota in ((0, 0), (1, 2), (3, 3))]
    nodes = [node("n0", gpu=1), node("n1", gpu=1), node("n2", gpu=4)]
    cluster.at(1, *queues, *nodes)
    first = [("j0", "q0", 1), ("j3", "q1", 1), ("j4", "q3", 1), ("j7", "q1", 2), ("j1", "q0", 1)]
    cluster.at(2, *(job(name, q, gpu=gpu) for name, q, gpu in first))
    settle(cluster, 2)
    # when q3 asks 2 GPUs and then 1,
    cluster.when(3, job("j8", "q3", gpu=2), job("j10", "q3", gpu=1))
    # then j8 takes q1's 2-GPU job by the fallback (no fair-share set frees 2 GPUs on one
    # node; q3 ends at its deserved 3), and j10 takes q0's GPU by fair share (q3 at 4).
    assert preempts(cluster.last) == [("j7", "reclaim", "j8"), ("j0", "reclaim", "j10")]
    settle(cluster, 3)
    assert (gpus(cluster, "q0"), gpus(cluster, "q1"), gpus(cluster, "q3")) == (1, 1, 4)
