"""A job shaped like one already found blocked in the cycle is not tried again: the commands and
the reasons are the same as when every job is tried in full."""

from __future__ import annotations

import pickle
from typing import Any
from unittest import mock

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.cycle import look_alikes, session
from domain.cycle.framework import CycleView, Outcome
from domain.pending import Standing
from domain.plugins import Plugins
from domain.reasons import ReasonKind
from domain.rules.priority import WithinQueuePriority
from domain.simulation import Simulator
from domain.state import Job, JobStatus
from tests.domain.harness import Cluster, event, job, node, queue
from tests.domain.test_preemption_properties import MODULES, queue_line

POLICIES = ["round_robin", "intelligent", "balance", "fifo"]  # most skip a blocked job
FIELDS = {
    "queue": st.sampled_from(["p", "p-x", "p-y", "q"]),
    "priority": st.integers(1, 9),
    "module": st.sampled_from(MODULES),
    "tasks": st.integers(1, 3),
    "resources": st.sampled_from([0.5, 1, 2, 4]).map(lambda gpu: {"gpu": gpu}),
    "preemptible": st.booleans(),
    "interactive": st.booleans(),
}


@st.composite
def look_alike_backlogs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Many jobs from a few templates, each template differing from the first in one field:
    most jobs share a shape with another, or differ from one in a single field."""
    lines: list[dict[str, Any]] = [
        {"type": "ClusterConfigured", "ts": 0, "consolidation": draw(st.booleans())}
    ]
    rules: dict[str, Any] = {"within_queue": draw(st.booleans())}
    if draw(st.booleans()):
        rules["self_level"] = {
            "high_priority": [5, 9],
            "low_priority": [1, 4],
            "modules": draw(st.lists(st.sampled_from(MODULES), min_size=1, unique=True)),
        }
    parent_rules: dict[str, Any] = {"within_queue": draw(st.booleans())}
    if draw(st.booleans()):  # the parent's own jobs may take from matching jobs below it
        low = draw(st.integers(1, 9))
        parent_rules["child_level"] = {
            "priority": [low, draw(st.integers(low, 9))],
            "modules": draw(st.lists(st.sampled_from(MODULES), min_size=1, unique=True)),
        }
    lines.append(queue_line("p", None, -1, parent_rules))
    for name, parent, quota in (("p-x", "p", 4), ("p-y", "p", 4), ("q", None, 8)):
        line = queue_line(name, parent, draw(st.integers(0, quota)), rules)
        line["policy"] = {"kind": draw(st.sampled_from(POLICIES))}
        lines.append(line)
    for index in range(draw(st.integers(1, 3))):
        gpus = draw(st.sampled_from([2, 4, 8]))
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index}", "capacity": {"gpu": gpus}}
        )
    first = {name: draw(values) for name, values in FIELDS.items()}
    first["interactive"] = False
    templates = [first]
    for name in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=3)):
        templates.append({**first, name: draw(FIELDS[name])})
    ts = 0
    for index in range(draw(st.integers(2, 16))):
        ts += draw(st.sampled_from([0, 0, 0, 1000, 4000]))
        template = draw(st.sampled_from(templates))
        duration = draw(st.integers(1, 8))
        lines.append(
            {
                "type": "JobSubmitted",
                "ts": ts,
                "job": f"j{index}",
                **template,
                "duration_s": duration,
            }
        )
    return lines


class WatchedSimulator(Simulator):
    """Notes, after every cycle, why each pending job waits and what stopped each queue."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[object] = []

    def _cycle_and_answer(self, ts: int) -> None:
        super()._cycle_and_answer(ts)
        state = self.state
        waiting = sorted(
            (job.id, job.pending_reason.text if job.pending_reason else None, job.blocked_since)
            for job in state.jobs.values()
            if job.status is JobStatus.PENDING
        )
        stopped = sorted((queue.id, queue.stopped_by) for queue in state.queues.values())
        self.seen.append((ts, waiting, stopped))


def simulate(
    lines: list[dict[str, Any]], watched: type[WatchedSimulator] | None = None
) -> tuple[list[bytes], list[object]]:
    """The commands for the lines, and what `watched` (WatchedSimulator by default) saw."""
    simulator = (watched or WatchedSimulator)()
    out = [orjson.dumps(o) for o in simulator.run(orjson.dumps(line) for line in lines)]
    return out, simulator.seen


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(look_alike_backlogs())
def test_look_alike_jobs_get_the_commands_and_reasons_of_full_tries(
    lines: list[dict[str, Any]],
) -> None:
    remembered = simulate(lines)
    with mock.patch.object(
        look_alikes.LookAlikeKeys, "key", lambda self, job: None
    ):  # every job tried in full
        tried = simulate(lines)
    assert remembered == tried


def test_a_backlog_of_look_alike_jobs_waits_for_one_reason_and_the_oldest_goes_first() -> None:
    cluster = Cluster()
    cluster.given(0, queue("q", gpu_quota=8, policy={"kind": "intelligent"}), node("n0", gpu=2))
    cluster.given(0, job("big", "q", gpu=2))
    cluster.agents_obey()

    cluster.when(1000, *(job(f"j{i}", "q", gpu=1, priority=3) for i in range(5)))

    assert not cluster.last
    first = cluster.why("j0")
    assert first[0] is ReasonKind.CAPACITY
    assert [cluster.why(f"j{i}") for i in range(1, 5)] == [first] * 4
    assert {entry.standing for entry in cluster.pending("q")} == {Standing.SKIPPED}

    cluster.finish(2000, "big")

    assert [(c.type, c.job) for c in cluster.last] == [("Dispatch", "j0"), ("Dispatch", "j1")]


def test_a_look_alike_of_higher_priority_is_tried_where_priority_decides_preemption() -> None:
    # Given a queue with within-queue preemption, whose intelligent policy has aged an old
    # priority-1 job above a new priority-5 one of the same shape
    cluster = Cluster()
    policy = {"kind": "intelligent", "aging_interval_s": 1}
    cluster.given(
        0,
        queue("q", gpu_quota=4, policy=policy, preemption={"within_queue": True}),
        node("n0", gpu=4),
    )
    cluster.given(0, job("running", "q", gpu=4, priority=1))
    cluster.agents_obey()
    cluster.given(1000, job("old", "q", gpu=4, priority=1))

    # When the new job comes: the old one is tried first and blocked (it may not preempt a
    # job of its own priority)
    cluster.when(10_000, job("new", "q", gpu=4, priority=5))

    # Then the new one is still tried in full, and preempts the running job
    assert cluster.preempted() == ["running"]
    assert cluster.why("old")[0] is ReasonKind.CAPACITY


def test_a_look_alike_in_a_self_level_range_is_tried_after_one_below_it() -> None:
    # Given queue a whose self-level rule lets priorities 5-9 preempt a sibling's 1-4, and an
    # old priority-1 job of a that intelligent has aged above a new priority-5 one
    cluster = Cluster()
    rule = {"high_priority": [5, 9], "low_priority": [1, 4], "modules": ["DLC"]}
    policy = {"kind": "intelligent", "aging_interval_s": 1}
    cluster.given(
        0,
        queue("a", gpu_quota=0, policy=policy, preemption={"self_level": rule}),
        queue("b", gpu_quota=4),
        node("n0", gpu=4),
    )
    cluster.given(0, job("running", "b", gpu=4, priority=1, module="DLC"))
    cluster.agents_obey()
    cluster.given(1000, job("old", "a", gpu=4, priority=1, module="DLC"))

    # When the new job comes: the old one is tried first and blocked (below the rule's range)
    cluster.when(10_000, job("new", "a", gpu=4, priority=5, module="DLC"))

    # Then the new one is still tried in full, and preempts b's job
    assert cluster.preempted() == ["running"]


class CountingReadsPriority(WithinQueuePriority):
    """Within-queue priority preemption that counts how often it is asked whether it reads
    a job's priority."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        self.asked.append(job.queue)
        return super().reads_priority(cycle, job)


def test_whether_priority_is_read_is_asked_once_per_queue_until_the_configuration_changes() -> None:
    # Given two queues, and a full node whose job's cycle asked about queue a
    rule = CountingReadsPriority()
    cluster = Cluster(Plugins(preemption_rules=[rule]))
    cluster.given(
        0,
        queue("a", gpu_quota=2, policy={"kind": "round_robin"}),
        queue("b", gpu_quota=2, policy={"kind": "round_robin"}),
        node("n0", gpu=2),
    )
    cluster.given(0, job("big", "a", gpu=2))
    cluster.agents_obey()
    assert rule.asked == ["a"]

    # When two cycles try six blocked jobs of each queue, of three priorities
    cluster.when(
        1000, *(job(f"{q}{i}", q, gpu=1, priority=1 + i % 3) for q in "ab" for i in range(6))
    )
    cluster.when(2000, job("b6", "b", gpu=1))

    # Then the rule was asked once per queue
    assert sorted(rule.asked) == ["a", "b"]
    assert cluster.why("b5")[0] is ReasonKind.CAPACITY

    # And once more for each queue tried after the configuration changed
    cluster.when(3000, queue("b", gpu_quota=2, policy={"kind": "round_robin"}))
    assert sorted(rule.asked) == ["a", "a", "b", "b"]


def test_a_preemptor_still_waiting_for_its_victims_changes_nothing_lasting() -> None:
    # Given a job that preempted a lower-priority one and holds its room while it stops
    cluster = Cluster()
    cluster.given(0, queue("q", gpu_quota=4, preemption={"within_queue": True}), node("n0", gpu=4))
    cluster.given(0, job("low", "q", gpu=4, priority=1))
    cluster.agents_obey()
    cluster.given(1000, job("high", "q", gpu=4, priority=9))
    assert cluster.preempted(cluster.commands) == ["low"]

    # When a later cycle tries it again before the victim has stopped
    state = cluster.state
    cycle = session.Session(state, cluster.plugins, cluster.seq, 2000)
    before = cycle.lasting_changes()
    outcome, _ = cycle.try_schedule(state.jobs["high"])

    # Then it still waits, and look-alike jobs found blocked before the retry stay known
    assert outcome is Outcome.PREEMPTING
    assert cycle.lasting_changes() == before


def test_look_alikes_share_one_shape_key_which_goes_with_the_last_of_them() -> None:
    cluster = Cluster()
    cluster.given(0, queue("q", gpu_quota=8, policy={"kind": "round_robin"}), node("n0", gpu=2))
    cluster.given(0, job("big", "q", gpu=2))
    cluster.agents_obey()

    cluster.when(1000, *(job(f"j{i}", "q", gpu=1, priority=i + 1) for i in range(4)))

    keys = {id(cluster.state.jobs[f"j{i}"].shape_key) for i in range(4)}
    assert len(keys) == 1 and None not in keys  # priorities differ, no rule reads them
    copied = pickle.loads(pickle.dumps(cluster.state))  # as a projection checkpoint does
    [key] = {copied.jobs[f"j{i}"].shape_key for i in range(4)}
    assert copied.shape_keys[key.shape] is key  # still the one shared key
    cluster.when(2000, *(event("JobCancelled", job=f"j{i}") for i in range(4)))
    cluster.finish(3000, "big")
    assert not cluster.job_ids() and len(cluster.state.shape_keys) == 0
