"""Node agents that name themselves: restarts reconcile what runs, a second agent is refused (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import Dispatch, Preempt
from domain.events import Event
from tests.domain.device_checks import check_devices
from tests.domain.harness import Cluster, event, job, node, queue


def beat(name: str, instance: str, incarnation: int, running: Any = None, **fields: Any) -> Event:
    extra = {} if running is None else {"running": running}
    return node(name, gpu=8, instance=instance, incarnation=incarnation, **extra, **fields)


def running(*pairs: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"job": job_id, "attempt": attempt} for job_id, attempt in pairs]


def a_cluster_running_train_on_n1() -> Cluster:
    cluster = Cluster()
    cluster.given(0, queue("team", gpu_quota=8), beat("n1", "agent-a", 1, running()))
    (dispatch,) = cluster.given(1000, job("train", "team", gpu=8))
    assert isinstance(dispatch, Dispatch)
    assert (dispatch.node, dispatch.attempt, dispatch.incarnation) == ("n1", 1, 1)
    cluster.agents_obey()
    return cluster


def test_a_restarted_agent_that_runs_nothing_gets_its_job_back_as_a_new_attempt() -> None:
    cluster = a_cluster_running_train_on_n1()
    # when the agent restarts (incarnation 2) and says it runs nothing
    commands = cluster.when(2000, beat("n1", "agent-a", 2, running()))
    # then train is lost on n1, requeued, and dispatched again at once: its 8 GPUs were freed
    assert [(c.type, c.job, c.node, c.attempt) for c in commands] == [
        ("Dispatch", "train", "n1", 2)
    ]
    assert isinstance(commands[0], Dispatch) and commands[0].incarnation == 2
    # and a late report of the old attempt changes nothing
    assert cluster.when(3000, event("JobFinished", job="train", node="n1", attempt=1,
                                    outcome="succeeded")) == []  # fmt: skip
    assert cluster.job("train").attempt == 2


def test_a_restarted_agent_that_still_runs_its_job_keeps_it() -> None:
    cluster = a_cluster_running_train_on_n1()
    commands = cluster.when(2000, beat("n1", "agent-a", 2, running(("train", 1))))
    assert commands == []
    assert cluster.job("train").attempt == 1


def test_a_normal_heartbeat_never_loses_a_job_dispatched_since_the_agent_last_looked() -> None:
    cluster = a_cluster_running_train_on_n1()
    # given the same incarnation still reports nothing (it has not read the Dispatch yet)
    commands = cluster.when(2000, beat("n1", "agent-a", 1, running()))
    # then nothing is lost: only a restart reconciles
    assert commands == []
    assert cluster.job("train").attempt == 1


def test_a_restart_that_does_not_say_what_it_runs_reconciles_nothing() -> None:
    cluster = a_cluster_running_train_on_n1()
    assert cluster.when(2000, beat("n1", "agent-a", 2)) == []
    assert cluster.job("train").attempt == 1


def test_a_second_agent_for_a_live_node_is_refused_with_the_holder_and_what_to_do() -> None:
    cluster = a_cluster_running_train_on_n1()
    assert cluster.when(2000, beat("n1", "agent-b", 1, running())) == []
    ((refused, reason),) = cluster.rejections
    assert refused.instance == "agent-b"  # type: ignore[union-attr]
    assert "held by agent instance agent-a (incarnation 1)" in reason
    assert "stop the other agent, or start this one with another --node name" in reason
    assert "frees 30s after the holder's last heartbeat" in reason
    assert cluster.job("train").attempt == 1  # the holder's job is untouched


def test_an_agent_without_an_instance_is_refused_on_a_node_an_instance_holds() -> None:
    cluster = a_cluster_running_train_on_n1()
    cluster.when(2000, node("n1"))
    ((_, reason),) = cluster.rejections
    assert "held by agent instance agent-a" in reason and "names no instance" in reason


def test_an_older_incarnation_still_sending_is_refused() -> None:
    cluster = a_cluster_running_train_on_n1()
    cluster.when(2000, beat("n1", "agent-a", 2, running(("train", 1))))
    cluster.when(3000, beat("n1", "agent-a", 1, running()))
    ((_, reason),) = cluster.rejections
    assert "incarnation 1 of agent instance agent-a is older than its current incarnation 2" in (
        reason
    )


def test_once_the_holder_is_silent_for_the_timeout_another_instance_takes_the_node() -> None:
    cluster = a_cluster_running_train_on_n1()
    # given the holder's last heartbeat at ts 0 and the default 30 s timeout
    cluster.when(30_000, event("Tick"))  # the node is lost, train requeued (no node to run on)
    # when another instance (e.g. on a replacement machine) starts for n1
    commands = cluster.when(31_000, beat("n1", "agent-b", 1, running()))
    # then it is accepted and gets train as attempt 2
    assert cluster.rejections == []
    assert [(c.type, c.job, c.node, c.attempt) for c in commands] == [
        ("Dispatch", "train", "n1", 2)
    ]


def test_a_restart_loses_only_its_part_of_a_gang_and_the_rest_is_stopped() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("team", gpu_quota=16),
        beat("n1", "agent-1", 1, running()),
        beat("n2", "agent-2", 1, running()),
    )
    dispatches = cluster.given(1000, job("gang", "team", gpu=8, tasks=2))
    assert sorted(c.node for c in dispatches) == ["n1", "n2"]
    cluster.agents_obey()
    # when n1's agent restarts running nothing
    commands = cluster.when(2000, beat("n1", "agent-1", 2, running()))
    # then the gang's task on n2 is stopped (node_lost); the gang runs again once it is gone
    assert [(c.type, c.node, c.attempt) for c in commands] == [("Preempt", "n2", 1)]
    assert isinstance(commands[0], Preempt) and commands[0].reason == "node_lost"
    again = cluster.when(3000, event("JobPreempted", job="gang", node="n2", attempt=1))
    assert sorted((c.type, c.node, c.attempt) for c in again) == [
        ("Dispatch", "n1", 2),
        ("Dispatch", "n2", 2),
    ]


def test_a_dispatch_carries_what_the_agent_needs_to_run_the_job() -> None:
    cluster = Cluster()
    cluster.given(0, queue("team", gpu_quota=8), node("n1"))
    (dispatch,) = cluster.given(
        1000,
        job("j", "team", duration_s=12.5, labels={"command": "python train.py"}, user="alice"),
    )
    assert dispatch.to_wire() == {
        "type": "Dispatch",
        "job": "j",
        "node": "n1",
        "tasks": 1,
        "resources": {"gpu": 1, "cpu": 0, "memory": 0},
        "attempt": 1,
        "seq": 3,
        "ts": 1000,
        "reason": "quota",
        "duration_s": 12.5,
        "labels": {"command": "python train.py"},
        "user": "alice",
        "devices": [[0]],  # the device its one task was placed on (docs/devices.md)
    }  # no incarnation: n1's agent names no instance


def test_a_heartbeat_with_an_incarnation_but_no_instance_is_refused_by_the_codec() -> None:
    import pytest

    from domain.codec import DecodeError

    with pytest.raises(DecodeError, match="incarnation needs instance"):
        node("n1", incarnation=2)


def test_a_job_lost_to_a_restart_keeps_its_place_ahead_of_later_jobs() -> None:
    cluster = a_cluster_running_train_on_n1()
    cluster.given(1500, job("later", "team", gpu=8))  # pending behind train: no room
    assert cluster.last == []
    commands = cluster.when(2000, beat("n1", "agent-a", 2, running()))
    assert [(c.job, c.attempt) for c in commands] == [("train", 2)]  # not "later"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from("sorfk"), st.integers(0, 7)), max_size=25))
def test_restarts_never_leave_resources_unaccounted_for(steps: list[tuple[str, int]]) -> None:
    """Whatever mix of submissions, reports, restarts (running any subset of what they had),
    finishes and ticks: each node holds exactly its jobs' placed and stopping tasks, and
    never more than its capacity."""
    cluster = Cluster()
    incarnations = {"n1": 1, "n2": 1}
    cluster.given(0, queue("team", gpu_quota=16), *(beat(n, f"a-{n}", 1, running()) for n in
                                                     sorted(incarnations)))  # fmt: skip
    ts, submitted = 0, 0
    for kind, pick in steps:
        ts += 1000
        if kind == "s":
            submitted += 1
            cluster.at(ts, job(f"j{submitted}", "team", gpu=1 + pick % 8, tasks=1 + pick % 2))
        elif kind == "o":
            cluster.agents_obey(ts)
        elif kind == "r":
            name = sorted(incarnations)[pick % 2]
            incarnations[name] += 1
            on_node = sorted(
                (j.id, j.attempt) for j in cluster.state.jobs.values() if name in j.placements
            )
            kept = [pair for index, pair in enumerate(on_node) if (pick >> index) & 1]
            cluster.at(ts, beat(name, f"a-{name}", incarnations[name], running(*kept)))
        elif kind == "f" and cluster.state.jobs:
            running_jobs = sorted(j for j, s in cluster.state.jobs.items() if s.placements)
            if running_jobs:
                cluster.finish(ts, running_jobs[pick % len(running_jobs)])
        else:
            cluster.at(ts, event("Tick"))
        assert cluster.rejections == []
        check_devices(cluster.state)
        for node_state in cluster.state.nodes.values():
            tasks: dict[str, int] = {}
            for job_state in cluster.state.jobs.values():
                here = job_state.placements.get(node_state.id, 0)
                stop = job_state.stopping.get(node_state.id)
                here += stop.tasks if stop else 0
                if here:
                    tasks[job_state.id] = here
            assert node_state.jobs == tasks
            assert node_state.free.gpu >= 0
