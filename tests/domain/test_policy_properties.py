"""Queue-policy invariants under any interleaving of submissions, finishes and ticks (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain.commands import Dispatch, NodeCommand
from domain.cycle.framework import QueuePolicy
from domain.cycle.ordering import pending_in_order
from domain.decider import accept, close_group, fold, initial_state
from domain.events import Event, JobSubmitted, JournalRecord
from domain.evolve import evolve
from domain.plugins import DEFAULT_PLUGINS
from domain.resources import ZERO, Resources
from domain.state import Job, JobStatus, Queue, State
from tests.domain.device_checks import check_devices
from tests.domain.harness import event, job, node, queue

KINDS = ["fifo", "round_robin", "balance", "intelligent"]
S = 1000


submit = st.tuples(
    st.just("submit"),
    st.integers(0, 2),  # queue
    st.sampled_from([0.5, 1, 2, 3, 4]),  # gpu per task
    st.integers(1, 3),  # tasks (a gang)
    st.integers(1, 9),  # priority
    st.booleans(),  # interactive
    st.sampled_from([None, None, "x", "y"]),  # node selector: zone
)
finish = st.tuples(st.just("finish"), st.integers(0, 50))
tick = st.tuples(st.just("tick"), st.sampled_from([1, 5, 30, 61, 400, 700]))
step = st.sampled_from([1, 1, 20, 45])  # seconds before a submission or finish
operations = st.lists(
    st.tuples(st.one_of(submit, submit, finish, tick), step), min_size=8, max_size=40
)
queues = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 6), st.sampled_from([-1, 0, 6, 10])),
    min_size=3,
    max_size=3,
)


@dataclass
class Journal:
    """A live core driven group by group, with agents that answer every command next group."""

    state: State = field(default_factory=initial_state)
    records: list[JournalRecord] = field(default_factory=list)
    commands: list[NodeCommand] = field(default_factory=list)
    answers: list[Event] = field(default_factory=list)
    ts: int = 0
    jobs: int = 0

    def group(self, ts: int, events: list[Event]) -> list[NodeCommand]:
        self.ts = ts
        for item in [*self.answers, *events]:
            if item.type != "Tick" and accept(self.state, item) is not None:
                continue
            record = JournalRecord(seq=len(self.records) + 1, ts=ts, event=item)
            self.records.append(record)
            self.state, emitted = fold(self.state, record)
            assert emitted == []  # one group per ts: nothing closes it early
        self.state, emitted = close_group(self.state)
        self.commands += emitted
        self.answers = [
            event(
                "JobStarted" if isinstance(c, Dispatch) else "JobPreempted",
                job=c.job,
                node=c.node,
                attempt=c.attempt,
            )
            for c in emitted
        ]
        return emitted


def run(policies: list[tuple[str, int, int]], ops: list[Any]) -> Journal:
    journal = Journal()
    setup: list[Event] = [event("ClusterConfigured", heartbeat_timeout_s=1_000_000)]
    for index, (kind, quota, limit) in enumerate(policies):
        setup.append(
            queue(
                f"q{index}",
                gpu_quota=quota,
                gpu_limit=limit,
                policy={"kind": kind, "balance_timeout_s": 60, "aging_interval_s": 120},
            )
        )
    setup += [
        node("n1", gpu=4, labels={"zone": "x"}),
        node("n2", gpu=4, labels={"zone": "y"}),
        node("n3", gpu=2, labels={"zone": "y"}),
    ]
    journal.group(0, setup)
    for op, seconds in ops:
        ts = journal.ts + seconds * S
        events: list[Event] = []
        if op[0] == "submit":
            _, q, gpu, tasks, priority, interactive, zone = op
            selector = {"node_selector": {"zone": zone}} if zone else {}
            journal.jobs += 1
            events.append(
                job(
                    f"j{journal.jobs}",
                    f"q{q}",
                    gpu=gpu,
                    tasks=tasks,
                    priority=priority,
                    interactive=interactive,
                    **selector,
                )
            )
        elif op[0] == "finish":
            running = sorted(j for j, x in journal.state.jobs.items() if x.placements)
            if running:
                chosen = journal.state.jobs[running[op[1] % len(running)]]
                events += [
                    event(
                        "JobFinished",
                        job=chosen.id,
                        node=n,
                        attempt=chosen.attempt,
                        outcome="succeeded",
                    )
                    for n in sorted(chosen.placements)
                ]
        else:
            ts = journal.ts + op[1] * S
            events.append(event("Tick"))
        before = {j.id for j in journal.state.jobs.values() if j.status is JobStatus.PENDING}
        # Jobs with room held for them by a preemption already started: placing them there is
        # not passing anyone (a preemptor is not blocked, and its freed room is its own).
        preemptors = {j for j in before if journal.state.jobs[j].held}
        emitted = journal.group(ts, events)
        check_capacity_and_limits(journal.state)
        submitted = {e.job for e in events if isinstance(e, JobSubmitted)}
        check_policy_order(journal.state, emitted, (before | submitted) - preemptors)
    return journal


def check_capacity_and_limits(state: State) -> None:
    recount = sum((n.free.clamp_at_zero() for n in state.nodes.values() if not n.lost), Resources())
    assert state.node_index.free_total == recount  # the index's running sum never drifts
    for node_state in state.nodes.values():
        assert node_state.allocated.fits_in(node_state.capacity), node_state
        # What is held for a preemptor is what its victims free once they stop: it may overlap
        # their stopping tasks, never the tasks that keep running.
        running = ZERO
        for job_id in sorted(node_state.jobs):
            placed = state.jobs[job_id]
            running = running + placed.per_task * placed.placements.get(node_state.id, 0)
        assert (running + node_state.held).fits_in(node_state.capacity), node_state
    check_devices(state)  # the same per GPU device, and no device double-booked
    for queue_state in state.queues.values():
        assert queue_state.quota.limit_breach(queue_state.subtree_allocated) is None, queue_state.id


def check_policy_order(state: State, emitted: list[NodeCommand], were_pending: set[str]) -> None:
    """A job placed while a job ahead of it in its queue stays pending (and blocked) is only
    allowed where the queue's policy skips that job: never in fifo; in balance once the job has
    been blocked for balance_timeout_s; in intelligent when its priority is below 7."""
    placed = {
        c.job for c in emitted if isinstance(c, Dispatch) and c.reason in ("quota", "over_quota")
    }
    for job_id in sorted(placed & were_pending):
        placed_job = state.jobs.get(job_id)
        if placed_job is None:
            continue
        queue_state = state.queues[placed_job.queue]
        policy = DEFAULT_PLUGINS.queue_policies[queue_state.policy.kind]

        def key(
            item: Job, policy: QueuePolicy = policy, queue_state: Queue = queue_state
        ) -> tuple[int, int, int]:
            rank = policy.effective_priority(item, queue_state, state.ts)
            return (0 if item.interactive else 1, -rank, item.order)

        for other_id in queue_state.pending.job_ids():
            other = state.jobs[other_id]
            if other.awaiting or key(other) > key(placed_job):
                continue  # behind it, or a preemption started for it: not blocked (contract §5)
            kind = queue_state.policy.kind
            assert kind != "fifo", (other_id, job_id)
            if kind == "balance":
                assert other.blocked_since is not None
                assert state.ts - other.blocked_since >= 60 * S, (other_id, job_id)
            if kind == "intelligent":
                assert other.priority < 7, (other_id, job_id)


def wire(commands: list[NodeCommand]) -> bytes:
    return b"\n".join(orjson.dumps(c.to_wire()) for c in commands)


def replay(records: list[JournalRecord]) -> list[NodeCommand]:
    state = initial_state()
    commands: list[NodeCommand] = []
    for record in records:
        state, emitted = fold(state, record)
        commands += emitted
    state, emitted = close_group(state)
    return commands + emitted


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies=queues, ops=operations)
@example(  # a balance head that never fits, and a job behind it before and after its timeout
    policies=[("balance", 4, -1), ("fifo", 0, -1), ("intelligent", 0, -1)],
    ops=[
        (("submit", 0, 4, 3, 5, False, None), 1),
        (("submit", 0, 1, 1, 5, False, None), 1),
        (("submit", 0, 1, 1, 5, False, None), 45),
        (("submit", 0, 1, 1, 5, False, None), 20),
        (("submit", 2, 4, 3, 8, False, None), 1),
        (("submit", 2, 1, 1, 2, False, None), 1),
    ],
)
def test_policies_never_overcommit_fifo_keeps_order_and_replay_equals_live(
    policies: list[tuple[str, int, int]], ops: list[Any]
) -> None:
    journal = run(policies, ops)
    assert wire(replay(journal.records)) == wire(journal.commands)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), ops=operations)
@example(  # a consolidation's held room frees in the group where an interactive job arrives
    kind="balance",
    ops=[
        (("submit", 0, 0.5, 1, 1, False, None), 1),
        (("finish", 0), 1),
        (("submit", 0, 0.5, 1, 1, False, None), 1),
        (("finish", 0), 1),
        (("submit", 0, 0.5, 3, 1, False, None), 1),
        (("submit", 0, 1, 1, 1, False, None), 1),
        (("submit", 1, 0.5, 1, 1, True, None), 1),
        (("finish", 0), 1),
        (("submit", 0, 0.5, 1, 1, False, None), 1),
        (("submit", 0, 2, 3, 1, False, None), 1),
        (("submit", 1, 2, 1, 1, False, None), 1),
        (("tick", 61), 1),
        (("submit", 1, 0.5, 1, 1, True, None), 1),
    ],
)
def test_one_policy_everywhere(kind: str, ops: list[Any]) -> None:
    journal = run([(kind, 4, -1), (kind, 0, -1), (kind, 2, 4)], ops)
    assert wire(replay(journal.records)) == wire(journal.commands)


pending_jobs = st.lists(
    st.tuples(st.booleans(), st.integers(1, 9), st.integers(0, 5_000)),  # interactive, prio, s
    min_size=0,
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(kind=st.sampled_from(KINDS), jobs=pending_jobs, now_s=st.integers(0, 6_000))
def test_pending_order_is_interactive_then_effective_priority_then_submission(
    kind: str, jobs: list[tuple[bool, int, int]], now_s: int
) -> None:
    """The lazy merge of the per-priority lists equals a full sort by the contract's key."""
    state = initial_state()
    config = queue("q", gpu_quota=8, policy={"kind": kind, "aging_interval_s": 600})
    state, _ = fold(state, JournalRecord(seq=1, ts=0, event=config))
    ordered = sorted(jobs, key=lambda item: item[2])  # the journal's ts never runs backwards
    for index, (interactive, priority, submitted_s) in enumerate(ordered):
        submitted = job(f"j{index}", "q", priority=priority, interactive=interactive)
        record = JournalRecord(seq=index + 2, ts=submitted_s * S, event=submitted)
        state.seq = record.seq
        evolve(state, submitted, record.seq, record.ts)
    queue_state = state.queues["q"]
    policy = DEFAULT_PLUGINS.queue_policies[kind]
    now = now_s * S + 5_000 * S

    def key(item: Job) -> tuple[int, int, int]:
        rank = policy.effective_priority(item, queue_state, now)
        return (0 if item.interactive else 1, -rank, item.order)

    expected = sorted((state.jobs[j] for j in queue_state.pending.job_ids()), key=key)
    got = list(pending_in_order(queue_state, policy, now))
    assert [j.id for j in got] == [j.id for j in expected]
