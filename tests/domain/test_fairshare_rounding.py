"""GPU fair shares are whole devices, by largest remainder (contract section 6, as KAI)."""

from __future__ import annotations

from domain.events import Event
from domain.fairshare import UNITS, Claimant, share_level, whole_units
from tests.domain.harness import Cluster, event, job, node, queue

GPU = UNITS[0]


def shares(cluster: Cluster, *names: str) -> list[float]:
    return [cluster.queue_view(name).fair_share[0] / GPU for name in names]


def weighted(name: str, weight: float, quota: float = 0) -> Event:
    spec = {"quota": quota, "limit": -1, "over_quota_weight": weight}
    return event("QueueConfigured", queue=name, resources={"gpu": spec})


def test_eleven_spare_gpus_split_3_4_and_7_6_give_3_and_8() -> None:
    claimants = [
        Claimant("a", 0, 11 * GPU, 3.4, 0, rank=0),
        Claimant("b", 0, 11 * GPU, 7.6, 0, rank=1),
    ]
    share_level(11 * GPU, claimants, GPU)
    assert [c.given / GPU for c in claimants] == [3, 8]


def test_the_same_split_in_a_cluster() -> None:
    cluster = Cluster()
    cluster.given(0, weighted("a", 3.4), weighted("b", 7.6), node("n1", gpu=11))
    cluster.when(
        1, *[job(f"a{i}", "a") for i in range(11)], *[job(f"b{i}", "b") for i in range(11)]
    )
    assert shares(cluster, "a", "b") == [3, 8]


def test_a_tie_goes_to_the_queue_configured_first_then_by_id() -> None:
    """Quotas 4, 4, 4 on 8 GPUs: exact shares 2.667 each; the two left-over devices go to the
    two queues configured first, whatever their ids."""
    for order in (["a", "b", "c"], ["c", "b", "a"]):
        cluster = Cluster()
        cluster.given(0, *[queue(q, gpu_quota=4) for q in order], node("n1", gpu=8))
        cluster.when(1, *[job(f"{q}{i}", q) for q in order for i in range(4)])
        got = dict(zip(order, shares(cluster, *order), strict=True))
        assert [got[q] for q in order] == [3, 3, 2]


def test_ties_in_configuration_order_fall_to_the_id() -> None:
    claimants = [Claimant("b", 0, 9e9, 1, 0, rank=0), Claimant("a", 0, 9e9, 1, 0, rank=0)]
    for claimant in claimants:
        claimant.given = 1.5 * GPU
    whole_units(claimants, GPU)
    assert [c.given / GPU for c in claimants] == [1, 2]


def test_the_earlier_examples_still_hold() -> None:
    """Quotas 3 : 1 share 12 idle GPUs 9 and 3; higher over-quota priority is served the
    spare capacity first."""
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=3), queue("b", gpu_quota=1), node("n1", gpu=12))
    cluster.when(
        1, *[job(f"a{i}", "a") for i in range(20)], *[job(f"b{i}", "b") for i in range(20)]
    )
    assert shares(cluster, "a", "b") == [9, 3]

    cluster = Cluster()
    cluster.given(
        0, queue("lo", gpu_quota=2), queue("hi", gpu_quota=2, priority=5), node("n1", gpu=9)
    )
    cluster.when(
        1, *[job(f"l{i}", "lo") for i in range(9)], *[job(f"h{i}", "hi") for i in range(9)]
    )
    assert shares(cluster, "lo", "hi") == [2, 7]


def test_shares_never_add_up_to_more_than_the_capacity() -> None:
    claimants = [Claimant(q, 0, 9e9, 1, 0, rank=i) for i, q in enumerate("abcdefg")]
    share_level(10 * GPU, claimants, GPU)
    given = [c.given / GPU for c in claimants]
    assert sum(given) == 10 and all(g in (1, 2) for g in given)
