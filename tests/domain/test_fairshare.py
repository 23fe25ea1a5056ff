"""Fair share per resource down the queue tree: deserved quota, over-quota priority and weight."""

from __future__ import annotations

import copy

import pytest

from domain import fairshare
from domain.events import Event
from domain.reasons import ReasonKind
from domain.state import State
from tests.domain.harness import Cluster, event, job, node, queue


def shares(cluster: Cluster, *names: str) -> list[float]:
    """Each queue's GPU fair share, in devices."""
    return [cluster.queue_view(name).fair_share[0] / 1000 for name in names]


def gpu_queue(name: str, quota: float, limit: float = -1, **fields: object) -> Event:
    weight = fields.pop("weight", None)
    spec: dict[str, object] = {"quota": quota, "limit": limit}
    if weight is not None:
        spec["over_quota_weight"] = weight
    return event("QueueConfigured", queue=name, resources={"gpu": spec}, **fields)


def pending(name: str, queue_name: str, count: int, gpu: float = 1) -> list[Event]:
    return [job(f"{name}{i}", queue_name, gpu=gpu) for i in range(count)]


def test_seed_002_quotas_3_and_1_share_12_idle_gpus_9_and_3() -> None:
    """Spare capacity follows deserved quota: 75% / 25% (contract §6 corrects the seed)."""
    cluster = Cluster()
    cluster.given(
        0, queue("a", gpu_quota=3), queue("b", gpu_quota=1), node("n1", gpu=8), node("n2", gpu=4)
    )
    cluster.when(1, *pending("a", "a", 20), *pending("b", "b", 20))
    assert shares(cluster, "a", "b") == [9, 3]
    assert cluster.queue_view("a").allocated.gpu == 9000
    assert cluster.queue_view("b").allocated.gpu == 3000


def test_deserved_quota_is_capped_by_demand_and_the_rest_is_spare() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=6), queue("b", gpu_quota=2), node("n1", gpu=8))
    cluster.when(1, *pending("a", "a", 2), *pending("b", "b", 10))
    assert shares(cluster, "a", "b") == [2, 6]


def test_quotas_above_capacity_are_scaled_down_in_proportion() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=6), queue("b", gpu_quota=2), node("n1", gpu=4))
    cluster.when(1, *pending("a", "a", 10), *pending("b", "b", 10))
    assert shares(cluster, "a", "b") == [3, 1]


def test_higher_over_quota_priority_is_served_spare_capacity_first() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        gpu_queue("low", 1, priority=0),
        gpu_queue("high", 1, priority=100),
        node("n1", gpu=8),
    )
    cluster.when(1, *pending("l", "low", 10), *pending("h", "high", 5))
    assert shares(cluster, "low", "high") == [3, 5]


def test_over_quota_weight_splits_spare_capacity() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1, weight=3), gpu_queue("b", 1, weight=1), node("n1", gpu=10))
    cluster.when(1, *pending("a", "a", 20), *pending("b", "b", 20))
    assert shares(cluster, "a", "b") == [7, 3]


def test_limit_caps_the_fair_share_and_the_rest_goes_to_others() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 2, limit=3), gpu_queue("b", 2), node("n1", gpu=10))
    cluster.when(1, *pending("a", "a", 20), *pending("b", "b", 20))
    assert shares(cluster, "a", "b") == [3, 7]


def test_limit_unset_means_nothing_beyond_quota() -> None:
    """KAI: limit 0 or unset allows no use beyond quota."""
    cluster = Cluster()
    cluster.given(
        0,
        event("QueueConfigured", queue="a", resources={"gpu": {"quota": 2}}),
        gpu_queue("b", 0),
        node("n1", gpu=8),
    )
    cluster.when(1, *pending("a", "a", 5), *pending("b", "b", 1))
    assert shares(cluster, "a", "b") == [2, 1]
    assert cluster.queue_view("a").allocated.gpu == 2000
    assert cluster.why("a2")[0] is ReasonKind.LIMIT


def test_weight_zero_gets_no_spare_while_others_want_it_but_idle_gpus_are_not_wasted() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 1, weight=0), gpu_queue("b", 1), node("n1", gpu=8))
    cluster.when(1, *pending("a", "a", 10), *pending("b", "b", 3))
    assert shares(cluster, "a", "b") == [5, 3]  # b wants only 3; the rest is a's
    cluster2 = Cluster()
    cluster2.given(0, gpu_queue("a", 1, weight=0), gpu_queue("b", 1), node("n1", gpu=8))
    cluster2.when(1, *pending("a", "a", 10), *pending("b", "b", 10))
    assert shares(cluster2, "a", "b") == [1, 7]


def test_unset_weight_follows_quota_or_is_one_for_no_or_unlimited_quota() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 0), gpu_queue("b", 0), gpu_queue("c", 2), node("n1", gpu=6))
    cluster.when(1, *pending("a", "a", 10), *pending("b", "b", 10), *pending("c", "c", 10))
    # c: quota 2, then spare 4 by weights 1 : 1 : 2.
    assert shares(cluster, "a", "b", "c") == [1, 1, 4]


def test_hierarchy_shares_level_by_level() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        gpu_queue("org-a", 6),
        gpu_queue("org-b", 2),
        gpu_queue("team-1", 4, parent="org-a"),
        gpu_queue("team-2", 2, parent="org-a"),
        node("n1", gpu=8),
        node("n2", gpu=8),
    )
    cluster.when(
        1, *pending("x", "team-1", 20), *pending("y", "team-2", 20), *pending("z", "org-b", 20)
    )
    assert shares(cluster, "org-a", "org-b") == [12, 4]
    assert shares(cluster, "team-1", "team-2") == [8, 4]


def test_a_parents_own_jobs_compete_as_one_more_child_with_the_quota_left_over() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        gpu_queue("org", 4),
        gpu_queue("team", 3, parent="org"),
        node("n1", gpu=4),
    )
    cluster.when(1, *pending("p", "org", 10), *pending("t", "team", 10))
    org = cluster.queue_view("org")
    assert org.fair_share[0] == 4000
    assert org.own_fair_share[0] == 1000
    assert shares(cluster, "team") == [3]


def test_a_resource_the_queue_does_not_mention_is_unmanaged() -> None:
    """A GPU-only queue may run jobs asking for cpu; its cpu share is water-filled, uncapped."""
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=1, gpu_limit=1), node("n1", gpu=2, cpu=8000))
    cluster.when(1, job("j", "a", resources={"gpu": 1, "cpu": 6000}, interactive=True))
    assert cluster.dispatched() == ["j"]
    assert cluster.last[0].reason == "quota"  # cpu is not managed, so not "over quota"
    assert cluster.queue_view("a").fair_share[1] == 6000


def test_shares_follow_capacity_when_a_node_arrives() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=3), queue("b", gpu_quota=1), node("n1", gpu=4))
    cluster.when(1, *pending("a", "a", 20), *pending("b", "b", 20))
    assert shares(cluster, "a", "b") == [3, 1]
    cluster.when(2, node("n2", gpu=8))
    assert shares(cluster, "a", "b") == [9, 3]


@pytest.mark.parametrize("change", ["submit", "finish", "reconfigure", "delete", "move", "node"])
def test_incremental_recompute_matches_a_full_one(change: str) -> None:
    cluster = Cluster()
    cluster.given(
        0,
        gpu_queue("org", 6),
        gpu_queue("other", 2),
        gpu_queue("t1", 2, parent="org"),
        gpu_queue("t2", 2, parent="org"),
        gpu_queue("spare", 0, parent="other"),
        node("n1", gpu=8),
    )
    cluster.when(1, *pending("a", "t1", 6), *pending("b", "t2", 3), *pending("c", "other", 4))
    cluster.agents_obey(2)
    steps = {
        "submit": lambda: cluster.when(3, *pending("d", "spare", 5)),
        "finish": lambda: cluster.finish(3, "a0"),
        "reconfigure": lambda: cluster.when(3, gpu_queue("t2", 4, parent="org", weight=5)),
        "delete": lambda: cluster.when(3, event("QueueDeleted", queue="spare")),
        "move": lambda: cluster.when(3, gpu_queue("t2", 0, parent="other")),
        "node": lambda: cluster.when(3, node("n2", gpu=4)),
    }
    steps[change]()
    assert cluster.rejections == []
    assert_full_equals_incremental(cluster.state)


def assert_full_equals_incremental(state: State) -> None:
    """The state's fair shares (kept incrementally) equal a from-scratch recompute."""
    if state.fair_share_stale:
        fairshare.recompute(state)
    fresh = copy.deepcopy(state)
    for cleared in fresh.queues.values():
        cleared.fair_share = cleared.own_fair_share = cleared.capped_demand = (0.0, 0.0, 0.0)
    fairshare.recompute(fresh, full=True)
    for name, kept in state.queues.items():
        other = fresh.queues[name]
        assert (kept.fair_share, kept.own_fair_share, kept.capped_demand) == (
            other.fair_share,
            other.own_fair_share,
            other.capped_demand,
        ), name


def test_shares_left_stale_by_a_cycle_with_nothing_pending_are_current_in_the_view() -> None:
    """A finish that leaves no job pending: its cycle reads no fair share, so it leaves them
    to be recomputed when read, and the view shows what a recompute gives, the queue that
    shrank its demand included."""
    cluster = Cluster()
    cluster.given(0, gpu_queue("a", 3, weight=2), gpu_queue("b", 1), node("n1", gpu=8))
    cluster.given(1, *pending("a", "a", 5), *pending("b", "b", 2))
    cluster.agents_obey(2)
    assert shares(cluster, "a", "b") == [5, 2]
    cluster.finish(3, "a0")
    expected = copy.deepcopy(cluster.state)
    fairshare.recompute(expected, full=True)
    assert shares(cluster, "a", "b") == [4, 2]
    assert [expected.queues[name].fair_share[0] / 1000 for name in ("a", "b")] == [4, 2]
