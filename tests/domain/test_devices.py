"""GPU devices: whole devices for whole-GPU tasks, fractions packed onto shared devices, freed by preemption."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import Dispatch, NodeCommand
from domain.reasons import ReasonKind
from domain.snapshot import decode_state, encode_state
from tests.domain.device_checks import check_devices
from tests.domain.harness import Cluster, event, job, node, queue


def devices(commands: list[NodeCommand]) -> dict[str, list[list[int]] | None]:
    """Each Dispatch's devices, by job."""
    return {c.job: c.devices for c in commands if isinstance(c, Dispatch)}


def a_cluster(*nodes: object, quota: float = 64) -> Cluster:
    cluster = Cluster()
    cluster.given(0, queue("team", gpu_quota=quota), *nodes)  # type: ignore[arg-type]
    return cluster


def test_whole_gpu_tasks_get_whole_devices_of_their_own_lowest_index_first() -> None:
    cluster = a_cluster(node("n1", gpu=8))
    cluster.when(1000, job("pair", "team", gpu=2, tasks=2), job("four", "team", gpu=4))
    assert devices(cluster.last) == {"pair": [[0, 1], [2, 3]], "four": [[4, 5, 6, 7]]}
    assert cluster.node_view("n1").device_used == tuple((d, 1000) for d in range(8))
    assert cluster.job_view("pair").devices == (("n1", ((0, 1), (2, 3))),)


def test_a_job_that_asks_no_gpu_gets_no_devices_and_a_whole_gpu_job_no_fraction() -> None:
    cluster = a_cluster(node("n1", gpu=2))
    cluster.when(1000, job("cpu", "team", resources={"cpu": 1000}), job("one", "team", gpu=1))
    dispatched = {c.job: c for c in cluster.last if isinstance(c, Dispatch)}
    assert (dispatched["cpu"].devices, dispatched["cpu"].gpu_fraction) == (None, None)
    assert (dispatched["one"].devices, dispatched["one"].gpu_fraction) == ([[0]], None)


def test_fractions_pack_onto_the_fullest_shared_device_before_a_fresh_one() -> None:
    cluster = a_cluster(node("n1", gpu=4))
    cluster.when(1000, *[job(f"half{i}", "team", gpu=0.5) for i in range(3)])
    assert devices(cluster.last) == {"half0": [[0]], "half1": [[0]], "half2": [[1]]}
    assert {c.gpu_fraction for c in cluster.last if isinstance(c, Dispatch)} == {0.5}
    # A quarter goes where least room is left that still holds it: device 1 (0.5 free),
    # not a fresh device; the next quarter fills device 1 up.
    cluster.when(2000, job("q1", "team", gpu=0.25))
    cluster.when(3000, job("q2", "team", gpu=0.25))
    assert devices(cluster.commands[-2:]) == {"q1": [[1]], "q2": [[1]]}
    cluster.when(4000, job("q3", "team", gpu=0.25))
    assert devices(cluster.last) == {"q3": [[2]]}  # devices 0 and 1 are full


def test_ties_between_equally_full_shared_devices_go_to_the_lowest_index() -> None:
    cluster = a_cluster(node("n1", gpu=4))
    cluster.given(1000, *[job(f"h{i}", "team", gpu=0.5) for i in range(4)])  # devices 0,0,1,1
    cluster.given(2000)
    cluster.finish(3000, "h0")
    cluster.finish(3000, "h3")  # device 0 and device 1 each keep one half
    cluster.when(4000, job("late", "team", gpu=0.5))
    assert devices(cluster.last) == {"late": [[0]]}


def test_sixteen_halves_leave_whole_devices_for_a_whole_gpu_job() -> None:
    # Per-node counting could spread sixteen 0.5-GPU jobs over all sixteen devices, leaving
    # "8 free" but no whole device; packed, they take devices 0-7 and an 8-GPU job fits.
    cluster = a_cluster(node("n1", gpu=16))
    for index in range(16):  # one at a time, each in its own cycle
        cluster.given(1000 + index, job(f"half{index}", "team", gpu=0.5))
    assert sorted(
        {c.devices[0][0] for c in cluster.commands if isinstance(c, Dispatch) and c.devices}
    ) == list(range(8))
    cluster.when(2000, job("eight", "team", gpu=8))
    assert devices(cluster.last) == {"eight": [list(range(8, 16))]}


def test_gpus_free_only_in_fractions_do_not_take_a_whole_gpu_task() -> None:
    # Given a 2-GPU node whose two devices each keep one half in use (1 GPU free in total),
    cluster = a_cluster(node("n1", gpu=2))
    cluster.given(1000, *[job(f"h{i}", "team", gpu=0.5) for i in range(4)])
    cluster.finish(2000, "h1")
    cluster.finish(2000, "h2")
    assert cluster.node_view("n1").free.gpu == 1000
    # when a 1-GPU task comes, it waits: no whole device is free,
    cluster.when(3000, job("whole", "team", gpu=1))
    assert cluster.dispatched() == []
    kind, facts = cluster.why("whole")
    assert (kind, facts["shared_devices_only"]) == (ReasonKind.CAPACITY, 1)
    assert "free only on devices that fractional tasks share" in cluster.reason("whole").text
    # while a half (of another queue: FIFO keeps this one behind "whole") still fits.
    cluster.when(4000, queue("other", gpu_quota=1), job("half", "other", gpu=0.5))
    assert devices(cluster.last) == {"half": [[0]]}


def test_a_whole_gpu_task_never_lands_on_a_device_a_fraction_uses() -> None:
    cluster = a_cluster(node("n1", gpu=2))
    cluster.given(1000, job("half", "team", gpu=0.5))
    cluster.when(2000, job("one", "team", gpu=1), job("two", "team", gpu=1))
    assert devices(cluster.last) == {"one": [[1]]}
    assert cluster.dispatched() == ["one"]  # "two" would need device 0, shared with "half"


def test_a_node_picks_tasks_only_up_to_its_free_whole_devices() -> None:
    # Two nodes: n1 has 2 whole devices free and a shared one; a gang of 3 one-GPU tasks
    # takes n1's two whole devices and one of n2's, never n1's shared device.
    cluster = a_cluster(node("n1", gpu=3), node("n2", gpu=4))
    cluster.given(1000, job("half", "team", gpu=0.5, node_selector=None))
    assert cluster.job_view("half").devices[0][0] == "n1"  # binpack: the smaller node first
    cluster.when(2000, job("gang", "team", gpu=1, tasks=3))
    placed = {c.node: c.devices for c in cluster.last if isinstance(c, Dispatch)}
    assert placed == {"n1": [[1], [2]], "n2": [[0]]}


def test_preemption_frees_the_victims_devices_for_the_preemptor() -> None:
    # Given low-priority halves spread over both devices of a 2-GPU node,
    cluster = Cluster()
    cluster.given(
        0, queue("team", gpu_quota=2, preemption={"within_queue": True}), node("n1", gpu=2)
    )
    cluster.given(1000, *[job(f"low{i}", "team", gpu=0.5, priority=3) for i in range(3)])
    cluster.agents_obey()  # devices 0, 0, 1
    cluster.finish(2000, "low1")  # devices 0 and 1 each keep one half: 1 GPU free, no device
    # when a high-priority whole-GPU job comes, a half is preempted (room counted per node
    # alone would have dispatched it at once, onto a shared device),
    cluster.when(3000, job("high", "team", gpu=1, priority=8))
    assert cluster.dispatched() == []
    (victim,) = cluster.preempted()
    freed = dict(cluster.job_view(victim).stopping_devices)["n1"][0][0]
    assert cluster.node_view("n1").device_stopping == ((freed, 500),)
    assert cluster.node_view("n1").device_held == ((freed, 1000),)
    # and once the victim has stopped, the preemptor gets the device it freed, and the
    # requeued victim packs into the half left on the other device.
    cluster.agents_obey(4000)
    assert devices(cluster.last) == {"high": [[freed]], victim: [[1 - freed]]}
    assert cluster.node_view("n1").device_held == ()
    assert cluster.node_view("n1").device_used == ((0, 1000), (1, 1000))


def test_a_victim_the_search_gives_back_keeps_its_device() -> None:
    # Given a quarter and a half sharing device 0, and three quarters of high priority on 1,
    cluster = Cluster()
    cluster.given(
        0, queue("team", gpu_quota=2, preemption={"within_queue": True}), node("n1", gpu=2)
    )
    quarter, half = job("a", "team", gpu=0.25, priority=1), job("b", "team", gpu=0.5, priority=1)
    cluster.given(1000, quarter, half)
    cluster.agents_obey()
    cluster.given(1500, job("keep", "team", gpu=0.75, priority=9))
    cluster.agents_obey()
    assert devices(cluster.commands) == {"a": [[0]], "b": [[0]], "keep": [[1]]}
    # when a whole-GPU job of priority 8 comes,
    cluster.when(2000, job("high", "team", gpu=1, priority=8))
    # then both sharers of device 0 are preempted (the search, dropping the quarter it did
    # not seem to need, once put it back on device 1, the fullest, and found device 0 whole)
    assert sorted(cluster.preempted()) == ["a", "b"]
    # and once they have stopped, the preemptor gets device 0.
    cluster.agents_obey(3000)
    assert devices(cluster.last)["high"] == [[0]]


def test_a_shrink_frees_the_devices_of_the_nodes_newest_tasks() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=2), queue("b", gpu_quota=2), node("n1", gpu=4))
    cluster.given(1000, job("elastic", "b", gpu=1, tasks=4, min_tasks=2))
    cluster.agents_obey()
    assert cluster.job_view("elastic").devices == (("n1", ((0,), (1,), (2,), (3,))),)
    cluster.when(2000, job("a0", "a", gpu=2))
    assert [(c.job, c.reason, c.tasks) for c in cluster.last] == [("elastic", "shrink", 2)]
    assert cluster.job_view("elastic").devices == (("n1", ((0,), (1,))),)
    cluster.agents_obey(3000)
    assert devices(cluster.last) == {"a0": [[2, 3]]}


def test_a_lost_node_frees_its_devices_and_a_returning_node_starts_empty() -> None:
    cluster = a_cluster(node("n1", gpu=2))
    cluster.given(1000, job("one", "team", gpu=1))
    cluster.given(40_000, event("Tick"))  # no heartbeat for 30 s: n1 is lost
    assert cluster.node_view("n1").lost and cluster.node_view("n1").device_used == ()
    cluster.when(41_000, node("n1", gpu=2))
    assert devices(cluster.last) == {"one": [[0]]}


def test_listed_devices_are_placed_by_their_own_indices() -> None:
    listed = [{"index": i, "model": "a100", "memory": 81920} for i in (0, 2, 3)]
    cluster = a_cluster(node("n1", gpu=3, devices=listed))
    assert cluster.node_view("n1").devices == (0, 2, 3)
    cluster.when(1000, job("two", "team", gpu=2), job("half", "team", gpu=0.5))
    assert devices(cluster.last) == {"two": [[0, 2]], "half": [[3]]}


def test_a_capacity_that_is_not_whole_ends_with_a_partial_device_for_fractions_only() -> None:
    cluster = a_cluster(node("n1", gpu=1.5))
    assert cluster.node_view("n1").devices == (0, 1)
    cluster.when(1000, job("one", "team", gpu=1), job("half", "team", gpu=0.5))
    assert devices(cluster.last) == {"one": [[0]], "half": [[1]]}  # the 0.5 slice is device 1


@pytest.mark.parametrize("gpu", [1.5, 2.25])
def test_more_than_one_gpu_that_is_not_whole_is_refused(gpu: float) -> None:
    cluster = a_cluster(node("n1", gpu=8))
    cluster.when(1000, job("odd", "team", gpu=gpu))
    ((_, reason),) = cluster.rejections
    assert "fraction of one device (below 1) or whole devices" in reason


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from("sssf"), st.sampled_from([0.25, 0.5, 0.75, 1, 2, 4])),
        max_size=30,
    ),
    st.sampled_from(["binpack", "spread"]),
)
def test_devices_are_never_double_booked_and_replay_rebuilds_them(
    steps: list[tuple[str, float]], placement: str
) -> None:
    """Any mix of fractional and whole jobs arriving and finishing on two nodes: every device
    within its capacity, whole tasks alone on theirs, and a replay of the journal (from the
    start, or from a snapshot) gives the same Dispatches, devices included, and state."""
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", placement=placement),
        queue("team", gpu_quota=-1),
        node("n1", gpu=4),
        node("n2", gpu=2.5),
    )
    ts = 0
    for index, (kind, gpu) in enumerate(steps):
        ts += 1000
        running = sorted(j for j, s in cluster.state.jobs.items() if s.placements)
        if kind == "f" and running:
            cluster.finish(ts, running[int(gpu * 4) % len(running)])
        else:
            cluster.at(ts, queue(f"q{index}", gpu_quota=0), job(f"j{index}", f"q{index}", gpu=gpu))
        check_devices(cluster.state)
    body = encode_state(cluster.state)
    replayed = Cluster()
    for record_ts, events in cluster.history:
        replayed.at(record_ts, *events)
    assert [c.to_wire() for c in replayed.commands] == [c.to_wire() for c in cluster.commands]
    assert encode_state(replayed.state) == body
    assert encode_state(decode_state(body)) == body
