"""The cycle's statement: a failed victim search leaves State exactly as it found it, and
rolled-back work emits nothing (hypothesis over generated clusters)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable
from enum import Enum
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from domain import fairshare
from domain.actions.lifting import worth_lifting
from domain.commands import PreemptReason
from domain.cycle.framework import CycleView
from domain.cycle.session import Session
from domain.decider import apply
from domain.indexes import NodeIndex, PendingIndex
from domain.plugins import Plugins
from domain.resources import ZERO, Resources
from domain.state import Job, Node, State
from tests.domain.harness import Cluster, job, node, queue

NODE_INDEX_DERIVED = frozenset({"_selectors", "_refiled", "_refiled_before", "lifting_kept"})


def canonical(value: Any) -> Any:
    """Everything a value holds, order included: dicts as item lists in insertion order
    (placement order counts), sets sorted, slotted classes field by field."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, State):
        _check_lifting_memo(value)
        _check_lifting_kept(value)
        _check_selector_rooms(value)
    if isinstance(value, Node):
        _check_copies_memo(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # A field left out of equality is a memo (Node.copies_memo): checked true, not compared.
        return [
            (f.name, canonical(getattr(value, f.name)))
            for f in dataclasses.fields(value)
            if f.compare
        ]
    if isinstance(value, NodeIndex | PendingIndex):
        # The free room kept per node selector and the nodes kept per lifting key are derived:
        # checked true (State), not compared; the log of refiled nodes is never rolled back.
        slots = [name for name in type(value).__slots__ if name not in NODE_INDEX_DERIVED]
        return [(name, canonical(getattr(value, name))) for name in slots]
    if isinstance(value, dict):
        return [(canonical(k), canonical(v)) for k, v in value.items()]
    if isinstance(value, set | frozenset):
        return sorted(canonical(item) for item in value)
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value


def _check_copies_memo(node: Node) -> None:
    """Every copies count the node remembers is what it would count afresh now."""
    fresh = dataclasses.replace(node, copies_memo={})
    for key, copies in node.copies_memo.items():
        assert isinstance(key, tuple)
        if isinstance(key[0], tuple):  # a request with the room the job holds here
            request, own_hold, own_devices = key
            asked = fresh.copies(Resources(*request), Resources(*own_hold), dict(own_devices))
            assert copies == asked, (node.id, key)
        else:  # a request alone: (gpu, cpu, memory)
            assert copies == fresh.copies(Resources(*key)), (node.id, key, copies)


def _check_lifting_memo(state: State) -> None:
    """Every node's remembered jobs whose lifting could let it hold one more task of a shape
    are those it would find afresh now (domain/actions/lifting.py)."""
    for each in state.nodes.values():
        fresh = dataclasses.replace(each, copies_memo={}, lifting_memo={})
        for key, growers in each.lifting_memo.items():
            assert isinstance(key, tuple)  # (gpu, cpu, memory, selector)
            gpu, cpu, memory, selector = key
            per_task = Resources(gpu, cpu, memory)
            assert growers == worth_lifting(state, fresh, per_task, selector), each.id


def _check_lifting_kept(state: State) -> None:
    """For every lifting key the node index keeps, each node not refiled since its mark has
    the jobs worth lifting it would find afresh now (none: not kept); and consolidation's
    order is the live nodes by most free GPU, then id."""
    index = state.node_index
    for (gpu, cpu, memory, selector), kept in index.lifting_kept.items():
        refiled, _ = index.refiled_since(kept.mark)
        if refiled is None:
            continue  # the log has started again since: the next ask reads every node
        for each in state.nodes.values():
            if each.id in refiled:
                continue
            fresh = dataclasses.replace(each, copies_memo={}, lifting_memo={})
            worth = worth_lifting(state, fresh, Resources(gpu, cpu, memory), selector)
            assert kept.by_node.get(each.id, ()) == worth, each.id
    live = [each for each in state.nodes.values() if not each.lost]
    assert index.most_free_gpu_first() == sorted((-each.free.gpu, each.id) for each in live)


def _check_selector_rooms(state: State) -> None:
    """The free room the node index keeps for each selector is what summing the live nodes
    it matches gives now (domain/selector_room.py)."""
    for selector in state.node_index.selectors_kept():
        total = ZERO
        for each in state.nodes.values():
            if not each.lost and each.matches(selector):
                total = total + each.free.clamp_at_zero()
        assert state.node_index.free_matching(selector, state.nodes) == total, selector


class NeverEnough:
    """A test rule that takes any lower-priority running job as a victim and never accepts the
    set: every search tries all its victims tentatively, then fails."""

    reason: PreemptReason = "priority"
    explains = "never: a test rule"
    explicit = False
    fairness = False

    def __init__(self) -> None:
        self.checked = 0

    def applies(self, cycle: CycleView, job: Job) -> bool:
        return True

    def candidate_queues(self, cycle: CycleView, job: Job) -> Iterable[str]:
        return sorted(cycle.state.queues)

    def admits(self, cycle: CycleView, job: Job, victim: Job) -> bool:
        return victim.priority < job.priority

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        self.checked += 1
        return False

    def reads_priority(self, cycle: CycleView, job: Job) -> bool:
        return True  # both applies and admits compare priorities


running_jobs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),  # queue
        st.integers(1, 4),  # gpu per task
        st.integers(1, 3),  # tasks
        st.booleans(),  # elastic (min_tasks 1)
        st.integers(1, 8),  # priority
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 4), running=running_jobs, gpu=st.integers(1, 8))
def test_a_failed_search_leaves_state_exactly_as_it_found_it(
    nodes: int, running: list[tuple[str, int, int, bool, int]], gpu: int
) -> None:
    rule = NeverEnough()
    plugins = Plugins(preemption_rules=[rule], resolvers=[])
    cluster = Cluster(Plugins(preemption_rules=[], resolvers=[]))
    cluster.given(
        0,
        queue("a", gpu_quota=8),
        queue("b", gpu_quota=8),
        *[node(f"n{i}", gpu=8) for i in range(nodes)],
    )
    for index, (queue_id, per_task, tasks, elastic, priority) in enumerate(running):
        extra = {"min_tasks": 1} if elastic and tasks > 1 else {}
        cluster.given(
            1 + index,
            job(f"r{index}", queue_id, gpu=per_task, tasks=tasks, priority=priority, **extra),
        )
    # The preemptor is folded without a cycle, so the search below is the first to try it.
    ts = 100
    apply(cluster.state, job("big", "a", gpu=gpu, tasks=nodes, priority=9), cluster.seq + 1, ts)
    fairshare.recompute(cluster.state)
    state: State = cluster.state
    before = copy.deepcopy(state)
    session = Session(state, plugins, cluster.seq + 1, ts)

    assert not session.preempt_for(state.jobs["big"], rule)

    assert canonical(state) == canonical(before)
    assert session.commit() == []
    event("victims taken tentatively" if rule.checked else "no victim set to check")
    if rule.checked:  # the search did take victims tentatively, then rolled them back
        assert session.statement.frees > 0


def test_the_property_above_reaches_tentative_work() -> None:
    """One fixed case of the property that certainly takes and returns victims."""
    rule = NeverEnough()
    cluster = Cluster(Plugins(preemption_rules=[], resolvers=[]))
    cluster.given(0, queue("a", gpu_quota=8), node("n0", gpu=8), node("n1", gpu=8))
    cluster.given(1, job("r0", "a", gpu=4, tasks=4, min_tasks=1), job("r1", "a", gpu=8))
    apply(cluster.state, job("big", "a", gpu=8, tasks=2, priority=9), cluster.seq + 1, 100)
    fairshare.recompute(cluster.state)
    before = copy.deepcopy(cluster.state)
    session = Session(cluster.state, Plugins(preemption_rules=[rule]), cluster.seq + 1, 100)
    assert not session.preempt_for(cluster.state.jobs["big"], rule)
    assert rule.checked > 0
    assert canonical(cluster.state) == canonical(before)


def test_rollback_drops_the_commands_emitted_since_its_checkpoint_and_commit_hands_out_the_rest() -> (
    None
):
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n0", gpu=8))
    apply(cluster.state, job("x", "a", gpu=2), cluster.seq + 1, 5)
    apply(cluster.state, job("y", "a", gpu=2), cluster.seq + 2, 5)
    fairshare.recompute(cluster.state)
    session = Session(cluster.state, Plugins(), cluster.seq + 2, 5)
    x, y = cluster.state.jobs["x"], cluster.state.jobs["y"]
    session.dispatch(x, {"n0": 1})
    outer = session.statement.checkpoint()
    before = copy.deepcopy(cluster.state)
    session.dispatch(y, {"n0": 1})
    inner = session.statement.checkpoint()
    session.stop(x, "priority", by="y")
    session.statement.rollback(inner)  # the stop is gone, y's dispatch stays
    assert session.statement.emitted == 2
    session.statement.rollback(outer)  # and now y's dispatch too
    assert canonical(cluster.state) == canonical(before)
    with pytest.raises(RuntimeError):
        session.statement.rollback(outer)  # a checkpoint is closed by its rollback
    assert [(c.type, c.job) for c in session.commit()] == [("Dispatch", "x")]


def test_what_is_never_tentative_refuses_to_run_inside_a_checkpoint() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8), node("n0", gpu=8))
    session = Session(cluster.state, Plugins(), cluster.seq, 1)
    session.statement.checkpoint()
    with pytest.raises(RuntimeError, match="never done inside a checkpoint"):
        session.statement.lose_node("n0")
    with pytest.raises(RuntimeError, match="checkpoint still open"):
        session.commit()


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=2, max_size=10),
    nodes=st.integers(2, 4),
    gpu=st.integers(2, 8),
)
def test_planning_consolidation_moves_leaves_state_exactly_as_it_found_it(
    sizes: list[int], nodes: int, gpu: int
) -> None:
    """Consolidation tries moves in nested checkpoints and rolls every one back before it
    decides anything: planning alone changes nothing."""
    from domain.actions.consolidate import plan_moves

    cluster = Cluster(Plugins(preemption_rules=[], resolvers=[]))
    cluster.given(0, queue("a", gpu_quota=32), *[node(f"n{i}", gpu=8) for i in range(nodes)])
    for index, size in enumerate(sizes):
        cluster.given(1 + index, job(f"r{index}", "a", gpu=size))
    apply(cluster.state, job("big", "a", gpu=gpu), cluster.seq + 1, 100)
    fairshare.recompute(cluster.state)
    before = copy.deepcopy(cluster.state)
    session = Session(cluster.state, Plugins(), cluster.seq + 1, 100)
    found = plan_moves(session, cluster.state.jobs["big"], 1)
    event("moves found" if found else "no moves")
    assert canonical(cluster.state) == canonical(before)
    assert session.commit() == []


def test_a_view_field_set_on_many_jobs_is_set_on_each_and_undone_by_a_rollback() -> None:
    # Given three pending jobs of one queue, each blocked (round robin tries every one)
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=8, policy={"kind": "round_robin"}), node("n0", gpu=1))
    cluster.given(1, *(job(name, "a", gpu=2) for name in ("x", "y", "z")))
    session = Session(cluster.state, Plugins(), cluster.seq, 5)
    statement, jobs = session.statement, [cluster.state.jobs[j] for j in ("x", "y", "z")]
    queue_a = cluster.state.queues["a"]
    before = [j.pending_reason for j in jobs]
    assert None not in before

    # When one reason is given to all three under a checkpoint (no walk of the queue kept),
    # then rolled back
    queue_a.pending.touched = None
    mark = statement.checkpoint()
    statement.set_view(queue_a, jobs, "pending_reason", None)
    assert [j.pending_reason for j in jobs] == [None, None, None]
    statement.rollback(mark)

    # Then each holds its own reason again
    assert all(j.pending_reason is why for j, why in zip(jobs, before, strict=True))

    # When it is given outside a checkpoint, with a walk of the queue kept, then without
    queue_a.pending.touched = set()
    statement.set_view(queue_a, jobs[:1], "pending_reason", None)
    assert queue_a.pending.touched == {"x"}  # the kept walk learns of the job set
    queue_a.pending.touched = None
    statement.set_view(queue_a, jobs[1:], "pending_reason", None)

    # Then every job holds it, and it is no lasting change
    assert [j.pending_reason for j in jobs] == [None, None, None]
    assert statement.lasting == 0
    with pytest.raises(ValueError, match="not a view field"):
        statement.set_view(queue_a, jobs, "status", None)
