"""Placement: gang all-or-nothing, binpack and spread, node selectors, the configured strategy."""

from __future__ import annotations

from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, event, job, node, queue


def nodes_of(cluster: Cluster) -> list[tuple[str, str, int]]:
    return [(c.job, c.node, c.tasks) for c in cluster.last if c.type == "Dispatch"]


def three_nodes(placement: str = "binpack") -> Cluster:
    """n1 empty (8 free), n2 with 3 free, n3 with 2 free."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement=placement),
        queue("a", gpu_quota=24),
        node("n1", gpu=8),
        node("n2", gpu=8),
        node("n3", gpu=8),
    )
    cluster.when(1, job("on-n2", "a", gpu=5, node_selector=None), job("on-n3", "a", gpu=6))
    placed = {c.job: c.node for c in cluster.last}
    # binpack put the 5 on the first empty node and the 6 on the next one
    assert placed == {"on-n2": "n1", "on-n3": "n2"}
    return cluster


def test_binpack_chooses_the_fullest_node_that_fits() -> None:
    cluster = three_nodes()  # free: n1 3, n2 2, n3 8
    cluster.when(2, job("two", "a", gpu=2))
    assert nodes_of(cluster) == [("two", "n2", 1)]
    cluster.when(3, job("three", "a", gpu=3))
    assert nodes_of(cluster) == [("three", "n1", 1)]


def test_spread_chooses_the_emptiest_node() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement="spread"),
        queue("a", gpu_quota=24),
        node("n1", gpu=8),
        node("n2", gpu=8),
    )
    cluster.when(1, job("j1", "a", gpu=2), job("j2", "a", gpu=2))
    assert sorted(c.node for c in cluster.last) == ["n1", "n2"]


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=4), node("n2", gpu=4))
    cluster.when(1, job("gang", "a", gpu=3, tasks=3))  # two fit (one per node), not three
    assert cluster.last == []
    assert cluster.node_view("n1").allocated.gpu == 0
    cluster.when(2, node("n3", gpu=4))
    assert sorted(nodes_of(cluster)) == [("gang", "n1", 1), ("gang", "n2", 1), ("gang", "n3", 1)]
    assert {c.seq for c in cluster.last} == {cluster.seq}


def test_a_gang_packs_several_tasks_per_node() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=8), node("n2", gpu=8))
    cluster.when(1, job("gang", "a", gpu=2, tasks=6))
    assert sorted(nodes_of(cluster)) == [("gang", "n1", 4), ("gang", "n2", 2)]


def test_node_selector_places_only_on_matching_nodes() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", gpu_quota=16),
        node("n1", gpu=8, labels={"gpu-model": "V100"}),
        node("n2", gpu=8, labels={"gpu-model": "A100"}),
    )
    cluster.when(1, job("wants-a100", "a", gpu=2, node_selector={"gpu-model": "A100"}))
    assert nodes_of(cluster) == [("wants-a100", "n2", 1)]
    cluster.when(2, job("wants-h100", "a", gpu=1, node_selector={"gpu-model": "H100"}))
    assert cluster.last == []
    kind, facts = cluster.why("wants-h100")
    assert (kind, facts["selector"]) == (ReasonKind.CAPACITY, "gpu-model=H100")


def test_every_resource_of_a_task_must_fit_on_its_node() -> None:
    cluster = Cluster()
    cluster.given(
        0, queue("a", gpu_quota=16), node("n1", gpu=8, cpu=4000), node("n2", gpu=2, cpu=64000)
    )
    cluster.when(1, job("cpu-heavy", "a", resources={"gpu": 1, "cpu": 8000}))
    assert nodes_of(cluster) == [("cpu-heavy", "n2", 1)]


def test_fractional_gpus_share_a_device_exactly() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=16), node("n1", gpu=1))
    cluster.when(1, job("h1", "a", gpu=0.5), job("h2", "a", gpu=0.5), job("h3", "a", gpu=0.5))
    assert [c.job for c in cluster.last] == ["h1", "h2"]
    assert cluster.node_view("n1").free.gpu == 0


def test_what_fits_for_a_job_holding_room_is_counted_with_its_own_hold() -> None:
    # given a node with half its CPU in use, two jobs kept pending by their queue's CPU
    # limit, and room held for them there: 3 cores for "big", 1 for "small" (CPU alone: no
    # GPU devices tell the two holds apart)
    cluster = Cluster()
    cpu_only = {"gpu": 0, "cpu": 1000, "memory": 0}
    limited = {"cpu": {"quota": 4000, "limit": 4000}}
    cluster.given(0, queue("a", resources=limited), node("n1", gpu=0, cpu=8000))
    cluster.given(1, job("running", "a", resources={"gpu": 0, "cpu": 4000, "memory": 0}))
    cluster.agents_obey()
    cluster.given(
        2, job("big", "a", resources=cpu_only, tasks=3), job("small", "a", resources=cpu_only)
    )
    state = cluster.state
    core = state.jobs["big"].per_task
    state.hold(state.jobs["big"], "n1", core * 3)
    state.hold(state.jobs["small"], "n1", core)
    n1 = state.nodes["n1"]

    def fits_for(job_id: str) -> int:
        holder = state.jobs[job_id]
        return n1.copies(core, holder.held["n1"], holder.held_devices.get("n1", {}))

    # when each asks how many one-core tasks fit for it, twice (the second answer remembered)
    # then each counts its own hold and not the other's: 4 free cores less the other's hold
    assert [fits_for("big"), fits_for("small"), fits_for("big"), fits_for("small")] == [3, 1, 3, 1]
