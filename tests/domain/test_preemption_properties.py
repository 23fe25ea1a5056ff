"""Invariants of preemption, consolidation and elasticity over generated clusters, run through
the Simulator (whose agent answers every command at the same ts)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import NodeCommand, Preempt
from domain.events import Event
from domain.resources import ZERO
from domain.simulation import Simulator
from domain.state import JobStatus, State
from tests.domain.device_checks import check_devices

MODULES = ["DLC", "DSW", "EAS"]
RULE_REASONS = {
    "reclaim",
    "priority",
    "interactive",
    "self_level",
    "child_level",
    "consolidation",
    "shrink",
}


# A job stopped more often than this at one ts means the scheduler oscillates (contract §6:
# no preemption cycles); the check fails at once instead of looping until the test times out.
MOST_STOPS_AT_ONE_TS = 3
# Nor across time: a scenario has at most 14 jobs of at most 20 s, so a job stopped more often
# than this is taken back and forth (as by a reclaim every second, test_preemption_chains).
MOST_STOPS_OF_A_JOB = 20


class CheckedSimulator(Simulator):
    """Checks node capacity and bookkeeping after every record it folds and every round, and
    that no job is stopped again and again at one ts."""

    def __init__(self) -> None:
        super().__init__()
        self._stops: dict[tuple[int, str], set[int]] = defaultdict(set)  # attempts stopped

    def _append(self, ts: int, event: Event) -> None:
        super()._append(ts, event)
        check_state(self.state)

    def _answer(self, ts: int, command: NodeCommand) -> None:
        check_state(self.state)
        # The core builds its commands without validating them (domain/trusted.py): each
        # must validate, and give the same bytes again.
        wire = orjson.dumps(command.to_wire())
        assert orjson.dumps(type(command).model_validate_json(wire).to_wire()) == wire
        if isinstance(command, Preempt):
            self._stops[(ts, command.job)].add(command.attempt)
            stops = len(self._stops[(ts, command.job)])
            assert stops <= MOST_STOPS_AT_ONE_TS, f"{command.job} stopped {stops}x at ts {ts}"
            assert command.attempt <= MOST_STOPS_OF_A_JOB, f"{command.job} stopped again and again"
        super()._answer(ts, command)


def check_state(state: State) -> None:
    for node in state.nodes.values():
        assert node.allocated.fits_in(node.capacity), f"{node.id} over capacity"
        assert min(node.allocated.as_tuple()) >= 0
        counted = ZERO
        for job_id in sorted(node.jobs):
            job = state.jobs[job_id]
            stopping = job.stopping.get(node.id)
            tasks = job.placements.get(node.id, 0) + (stopping.tasks if stopping else 0)
            assert tasks == node.jobs[job_id], (job_id, node.id)
            counted = counted + job.per_task * tasks
        assert counted == node.allocated, node.id
    for job in state.jobs.values():
        if job.status is JobStatus.PENDING:
            assert not job.placements
        for node_id in job.placements:
            assert node_id in state.nodes and state.nodes[node_id].jobs.get(job.id)
    check_devices(state)
    for queue in state.queues.values():  # a hard limit is never passed, not even mid-move
        assert queue.quota.limit_breach(queue.subtree_allocated) is None, queue.id


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {
            "type": "ClusterConfigured",
            "ts": 0,
            "placement": draw(st.sampled_from(["binpack", "spread"])),
            "consolidation": draw(st.booleans()),
        }
    ]
    ranges = st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda r: sorted(r))

    def rules(parent: bool) -> dict[str, Any]:
        preemption: dict[str, Any] = {"within_queue": draw(st.booleans())}
        if draw(st.booleans()):
            low_top = draw(st.integers(1, 8))
            preemption["self_level"] = {
                "high_priority": [draw(st.integers(low_top + 1, 9)), 9],
                "low_priority": [draw(st.integers(1, low_top)), low_top],
                "modules": draw(st.lists(st.sampled_from(MODULES), min_size=1, unique=True)),
            }
        if parent and draw(st.booleans()):
            preemption["child_level"] = {
                "priority": draw(ranges),
                "modules": draw(st.lists(st.sampled_from(MODULES), min_size=1, unique=True)),
            }
        return preemption

    queues = ["p", "p-x", "p-y", "q"]
    lines.append(queue_line("p", None, -1, rules(True)))
    lines.append(queue_line("p-x", "p", draw(st.integers(0, 4)), rules(False)))
    lines.append(queue_line("p-y", "p", draw(st.integers(0, 4)), rules(False)))
    lines.append(queue_line("q", None, draw(st.integers(0, 8)), rules(False)))
    for index in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        lines.append(
            {"type": "NodeHeartbeat", "ts": 0, "node": f"n{index}", "capacity": {"gpu": gpus}}
        )
    ts = 0
    for index in range(draw(st.integers(1, 14))):
        ts += draw(st.sampled_from([0, 0, 1000, 3000]))
        interactive = draw(st.booleans()) and draw(st.booleans())
        tasks = draw(st.integers(1, 4))
        line: dict[str, Any] = {
            "type": "JobSubmitted",
            "ts": ts,
            "job": f"j{index}",
            "queue": draw(st.sampled_from(queues)),
            "priority": draw(st.integers(1, 9)),
            "module": draw(st.sampled_from(MODULES)),
            "interactive": interactive,
            "tasks": tasks,
            "resources": {"gpu": draw(st.sampled_from([0.25, 0.5, 1, 2, 4]))},
            "duration_s": draw(st.integers(1, 20)),
        }
        if not interactive and draw(st.integers(0, 4)) == 0:
            line["preemptible"] = False
        if tasks > 1 and draw(st.booleans()):
            line["min_tasks"] = draw(st.integers(1, tasks - 1))
        lines.append(line)
    if draw(st.booleans()):
        ts += draw(st.sampled_from([0, 1000, 5000]))
        lines.append({"type": "NodeHeartbeat", "ts": ts, "node": "late", "capacity": {"gpu": 8}})
    # Drawn last, so the examples drawn before limits were added stay as they were: a hard
    # limit of quota + 0..3 GPUs on some of the queues below the unlimited parent p.
    for line in lines[2:5]:
        extra = draw(st.sampled_from([None, None, 0, 1, 3]))
        if extra is not None:
            gpu = line["resources"]["gpu"]
            gpu["limit"] = gpu["quota"] + extra
    return lines


def queue_line(
    name: str, parent: str | None, quota: int, preemption: dict[str, Any]
) -> dict[str, Any]:
    """A QueueConfigured wire line at ts 0 with a GPU quota and no limit."""
    return {
        "type": "QueueConfigured",
        "ts": 0,
        "queue": name,
        "parent": parent,
        "resources": {"gpu": {"quota": quota, "limit": -1}},
        "preemption": preemption,
    }


def run(lines: list[dict[str, Any]]) -> tuple[CheckedSimulator, list[dict[str, Any]]]:
    simulator = CheckedSimulator()
    out = list(simulator.run(orjson.dumps(line) for line in lines))
    return simulator, out


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_no_preemption_without_the_preemptor_placed_at_the_same_ts(
    lines: list[dict[str, Any]],
) -> None:
    _, out = run(lines)
    assert not [o for o in out if o["type"] == "Rejected"], out
    dispatched_at: dict[str, set[int]] = defaultdict(set)
    for o in out:
        if o["type"] == "Dispatch":
            dispatched_at[o["job"]].add(o["ts"])
    for o in out:
        if o["type"] == "Preempt" and o["by"] is not None:
            assert o["ts"] in dispatched_at[o["by"]], (o, out)


@SETTINGS
@given(scenarios())
def test_never_a_non_preemptible_or_interactive_victim(lines: list[dict[str, Any]]) -> None:
    _, out = run(lines)
    specs = {line["job"]: line for line in lines if line["type"] == "JobSubmitted"}
    for o in out:
        if o["type"] == "Preempt" and o["reason"] in RULE_REASONS:
            spec = specs[o["job"]]
            assert not spec["interactive"] and spec.get("preemptible", True), o


@SETTINGS
@given(scenarios())
def test_consolidation_and_preemption_never_lose_a_job(lines: list[dict[str, Any]]) -> None:
    simulator, out = run(lines)
    state = simulator.state
    submitted = {line["job"] for line in lines if line["type"] == "JobSubmitted"}
    for job_id in sorted(submitted):
        if job_id in state.jobs:
            job = state.jobs[job_id]
            assert job.status in (JobStatus.PENDING, JobStatus.RUNNING), (job_id, job.status)
            if job.status is JobStatus.PENDING:
                assert job_id in set(state.queues[job.queue].pending.job_ids())
        else:
            assert state.ended_jobs[job_id] is JobStatus.FINISHED, job_id
    # Nothing is left half-way: no stop unanswered, no preemptor waiting for victims.
    for job in state.jobs.values():
        assert not job.stopping and not job.awaiting, job
    # Attempts only grow, and a new attempt is dispatched in one step (one seq).
    latest: dict[str, tuple[int, int]] = {}
    for o in out:
        if o["type"] == "Dispatch" and o["reason"] != "expand":
            attempt, seq = latest.get(o["job"], (0, -1))
            assert o["attempt"] > attempt or (o["attempt"] == attempt and o["seq"] == seq), o
            latest[o["job"]] = (o["attempt"], o["seq"])


@SETTINGS
@given(scenarios())
def test_replay_is_deterministic(lines: list[dict[str, Any]]) -> None:
    assert run(lines)[1] == run(lines)[1]
