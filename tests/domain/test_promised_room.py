"""Room promised to preemptors: the fitter's kept sums, made from the queues' held room,
always equal the sums made holder by holder (hypothesis over generated preemption scenarios,
run through the Simulator)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from hypothesis import event, given

from domain import fairshare
from domain.cycle.fitting import Fitter, Promised
from domain.cycle.session import Session
from domain.decider import apply
from domain.plugins import Plugins
from domain.reasons import ReasonKind
from domain.resources import ZERO, Resources
from domain.simulation import Simulator
from domain.state import JobStatus, State
from tests.domain.harness import Cluster, job, node, queue
from tests.domain.test_preemption_properties import SETTINGS, scenarios


@contextmanager
def promised_checked() -> Iterator[list[int]]:
    """Wraps Fitter._promised: every answer is compared with the sums made holder by holder.
    Yields a one-item list counting the answers given while some job held room."""
    kept = Fitter._promised
    seen = [0]

    def checked(fitter: Fitter) -> Promised | None:
        answer = kept(fitter)
        state = fitter._state
        assert _nonzero(answer) == _nonzero(_summed_per_holder(state))
        if state.holders:
            seen[0] += 1
        return answer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Fitter, "_promised", checked)
        yield seen


def _summed_per_holder(state: State) -> Promised | None:
    """The reference: the promised sums holder by holder, without the queues' held room."""
    per_queue: dict[str, Resources] = {}
    own: dict[str, Resources] = {}
    for holder in sorted(state.holders):
        other = state.jobs[holder]
        if other.status is not JobStatus.PENDING:
            continue
        held = sum(other.held.values(), ZERO)
        per_queue[other.queue] = per_queue.get(other.queue, ZERO) + held
        if not other.preemptible:
            own[other.queue] = own.get(other.queue, ZERO) + held
    if not per_queue:
        return None
    subtree: dict[str, Resources] = {}
    for queue_id in sorted(per_queue):
        for ancestor in state.ancestors(queue_id):
            subtree[ancestor.id] = subtree.get(ancestor.id, ZERO) + per_queue[queue_id]
    return subtree, own


def _nonzero(promised: Promised | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sums without zero amounts: a queue promised nothing reads as absent."""
    subtree, own = promised or ({}, {})
    return (
        {q: amount for q, amount in subtree.items() if not amount.is_zero()},
        {q: amount for q, amount in own.items() if not amount.is_zero()},
    )


@SETTINGS
@given(scenarios())
def test_promised_room_is_never_stale(lines: list[dict[str, Any]]) -> None:
    with promised_checked() as seen:
        list(Simulator().run(orjson.dumps(line) for line in lines))
    event("checked while room was held" if seen[0] else "no room held")


def test_a_rolled_back_hold_is_not_promised_any_more() -> None:
    """Given a queue limited to 8 GPUs and 8 held for one of its pending jobs, a second job
    of it is refused for that promise; when the hold is rolled back, the same job fits."""
    cluster = Cluster(Plugins(preemption_rules=[], resolvers=[]))
    cluster.given(0, queue("a", gpu_quota=8, gpu_limit=8), node("n0", gpu=16))
    apply(cluster.state, job("p", "a", gpu=8), cluster.seq + 1, 5)
    apply(cluster.state, job("q", "a", gpu=4), cluster.seq + 2, 5)
    fairshare.recompute(cluster.state)
    session = Session(cluster.state, Plugins(), cluster.seq + 2, 5)
    holder, asking = cluster.state.jobs["p"], cluster.state.jobs["q"]

    trial = session.statement.checkpoint()
    session.statement.hold(holder, "n0", holder.per_task)
    refused = session.fit(asking, 1)
    assert refused.plan is None and refused.reason is not None
    assert refused.reason.kind is ReasonKind.LIMIT
    assert ("held_for_preemptors", 1) in refused.reason.facts

    session.statement.rollback(trial)
    assert session.fit(asking, 1).plan == {"n0": 1}


def test_a_holder_no_longer_pending_is_promised_nothing() -> None:
    """The sums from the queues' held room leave out a holder that is not pending (as the
    sums holder by holder do), even though its queue still counts what it holds."""
    cluster = Cluster(Plugins(preemption_rules=[], resolvers=[]))
    cluster.given(0, queue("a", gpu_quota=8), node("n0", gpu=16))
    apply(cluster.state, job("p", "a", gpu=4), cluster.seq + 1, 5)
    apply(cluster.state, job("q", "a", gpu=2, preemptible=False), cluster.seq + 2, 5)
    state = cluster.state
    for name in ("p", "q"):
        state.hold(state.jobs[name], "n0", state.jobs[name].per_task)

    state.jobs["p"].status = JobStatus.RUNNING

    assert _nonzero(Fitter._promised_sums(state)) == _nonzero(_summed_per_holder(state))
    subtree, own = _nonzero(Fitter._promised_sums(state))
    assert subtree == own == {"a": state.jobs["q"].per_task}


def test_look_alike_holders_holding_different_room_get_their_own_verdicts() -> None:
    """Given a queue limited to 7 GPUs and two look-alike pending jobs, one holding 4 GPUs
    and one 2: each counts only the other's room as promised, so the first may place its
    two tasks (4 + 2 <= 7) and the second may not (4 + 4 > 7)."""
    cluster = Cluster(Plugins(preemption_rules=[], resolvers=[]))
    cluster.given(0, queue("a", gpu_quota=7, gpu_limit=7), node("n0", gpu=16))
    apply(cluster.state, job("p1", "a", gpu=2, tasks=2), cluster.seq + 1, 5)
    apply(cluster.state, job("p2", "a", gpu=2, tasks=2), cluster.seq + 2, 5)
    fairshare.recompute(cluster.state)
    session = Session(cluster.state, Plugins(), cluster.seq + 2, 5)
    first, second = cluster.state.jobs["p1"], cluster.state.jobs["p2"]
    session.statement.hold(first, "n0", first.per_task * 2)
    session.statement.hold(second, "n0", second.per_task)

    assert session.fit(first, 2).plan == {"n0": 2}
    refused = session.fit(second, 2)
    assert refused.plan is None and refused.reason is not None
    assert ("held_for_preemptors", 1) in refused.reason.facts
