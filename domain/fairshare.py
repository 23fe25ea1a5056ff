"""Fair share per resource down the queue tree: each level shared by domain.fairshare_level,
only where its inputs changed (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from domain.fairshare_level import (
    UNITS,
    Claimant,
    Column,
    LevelMemo,
    served_alone,
    served_in_full,
    share_column,
    share_level,
    whole_units,
)
from domain.quota import UNLIMITED
from domain.state import Queue, State

__all__ = [
    "OWN",
    "UNITS",
    "Claimant",
    "recompute",
    "refresh",
    "share_level",
    "whole_units",
]

OWN = ""  # the slot of a queue's own jobs among its children (sorts before any queue id)
Share = tuple[float, float, float]
Inputs = tuple[Share, Share, Share]  # one claimant's caps, quotas and weights


def recompute(state: State, full: bool = False) -> None:
    """Sets fair_share and own_fair_share from capacity, configuration and demand.

    Incremental: only queues whose own demand or configuration changed (state.fair_share_dirty)
    and their ancestors are re-aggregated, and a level is re-shared only where its inputs may
    have changed: a subtree whose share from above is unchanged and in which nothing changed
    keeps every result, since the results are a deterministic function of exactly those
    inputs. A level last served in full (state.fair_share_levels) whose amount and claimants
    are the same re-checks only its changed claimants: when it is still served in full, the
    others keep their shares (their caps). The outcome is identical to a full walk (`full=True`).
    """
    full = full or state.fair_share_full
    touched = set(state.queues) if full else _with_ancestors(state, state.fair_share_dirty)
    for queue_id in _deepest_first(state, touched):
        _aggregate(state, state.queues[queue_id])
    if full:
        state.fair_share_levels.clear()
    capacity = state.capacity.as_tuple()
    amount = (float(capacity[0]), float(capacity[1]), float(capacity[2]))
    ranks = _Ranks(state)
    _, work = _share(state, None, amount, state.top_level_queues(), touched, ranks)
    while work:
        queue_id, share = work.pop()
        work.extend(_descend(state, queue_id, share, touched, ranks))
    state.fair_share_dirty.clear()
    state.fair_share_full = False
    state.fair_share_stale = False


def refresh(state: State) -> None:
    """Brings fair shares up to date: a cycle that reads none leaves them stale
    (domain.decider), so a reader outside a cycle (views, gauges, snapshots) calls this
    first. The result is what recomputing every cycle gives."""
    if state.fair_share_stale:
        recompute(state)


def _with_ancestors(state: State, dirty: set[str]) -> set[str]:
    touched: set[str] = set()
    for queue_id in sorted(dirty):
        if queue_id not in state.queues:
            continue  # deleted since; its parent was marked instead
        for queue in state.ancestors(queue_id):
            if queue.id in touched:
                break
            touched.add(queue.id)
    return touched


def _deepest_first(state: State, queue_ids: set[str]) -> list[str]:
    """Children before parents, so each aggregate reads its children's fresh ones."""
    depth = {q: sum(1 for _ in state.ancestors(q)) for q in queue_ids}
    return sorted(queue_ids, key=lambda q: (-depth[q], q))


def _aggregate(state: State, queue: Queue) -> None:
    """Subtree demand (own jobs' requests plus children's), each level capped by its limit."""
    totals: list[float] = [float(x) for x in queue.demand.as_tuple()]
    for child_id in queue.children:
        child = state.queues[child_id].capped_demand
        for r in range(3):
            totals[r] += child[r]
    queue.capped_demand = (
        _capped(queue, 0, totals[0]),
        _capped(queue, 1, totals[1]),
        _capped(queue, 2, totals[2]),
    )


def _capped(queue: Queue, r: int, amount: float) -> float:
    cap = queue.quota.limit[r]
    return amount if cap is None else min(amount, float(cap))


def _descend(
    state: State,
    queue_id: str,
    share: Share,
    touched: set[str],
    ranks: _Ranks,
) -> list[tuple[str, Share]]:
    """Sets one queue's shares; returns its children whose shares may have changed, with
    theirs, or nothing when unchanged."""
    queue = state.queues[queue_id]
    if queue_id not in touched and queue.fair_share == share:
        return []
    queue.fair_share = share
    if not queue.children:
        queue.own_fair_share = share
        state.fair_share_levels.pop(queue_id, None)
        return []
    own, children = _share(state, queue, share, list(queue.children), touched, ranks)
    assert own is not None
    queue.own_fair_share = own
    return children


class _Ranks:
    """Configuration order of the queues, built only when a level needs the full sharing."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._rank: dict[str, int] | None = None

    def __getitem__(self, queue_id: str) -> int:
        if self._rank is None:
            self._rank = {q: position for position, q in enumerate(self._state.queues)}
        return self._rank[queue_id]


def _share(
    state: State,
    parent: Queue | None,
    amount: Share,
    child_ids: Sequence[str],
    touched: set[str],
    ranks: _Ranks,
) -> tuple[Share | None, list[tuple[str, Share]]]:
    """Shares `amount` among the top-level queues (no parent) or a parent's own jobs and its
    children. Returns the parent's own share and the children's shares: all of them, or only
    the changed ones when the level is still served in full (the others keep theirs)."""
    key = None if parent is None else parent.id
    ids = tuple(child_ids) if parent is None else (OWN, *child_ids)
    own_quota = (
        None
        if parent is None
        else parent.quota.own_quota([state.queues[c].quota for c in child_ids])
    )
    memo = state.fair_share_levels.get(key)
    if memo is not None and memo.amount == amount and memo.ids == ids:
        changed = [q for q in sorted(touched) if state.queues[q].parent == key]
        inputs = {q: _inputs(state.queues[q]) for q in changed}
        if parent is not None and own_quota is not None:
            inputs[OWN] = _own_inputs(parent, own_quota)
        if _still_served(memo, inputs):
            own = inputs[OWN][0] if parent is not None else None
            return own, [(q, inputs[q][0]) for q in changed]
    everyone = [_inputs(state.queues[q]) for q in child_ids]
    if parent is not None and own_quota is not None:
        everyone.insert(0, _own_inputs(parent, own_quota))
    columns: list[list[float]] = []
    served = True
    order: tuple[list[int], list[int]] | None = None  # priorities and ranks, read once
    for r in range(3):
        caps = [i[0][r] for i in everyone]
        quotas = [i[1][r] for i in everyone]
        weights = [i[2][r] for i in everyone]
        if served_in_full(amount[r], UNITS[r], caps, quotas, weights):
            columns.append(caps)
            continue
        served = False
        if order is None:
            order = _priorities_and_ranks(state, parent, child_ids, ranks)
        column = Column(ids, quotas, caps, weights, *order)
        columns.append(share_column(amount[r], column, UNITS[r]))
    shares = [(a, b, c) for a, b, c in zip(*columns, strict=True)]
    if served:
        state.fair_share_levels[key] = LevelMemo(
            amount,
            ids,
            {ident: share for ident, share in zip(ids, shares, strict=True)},
            [sum(int(s[r]) for s in shares) for r in range(3)],
        )
    else:
        state.fair_share_levels.pop(key, None)
    if parent is None:
        return None, list(zip(child_ids, shares, strict=True))
    return shares[0], list(zip(child_ids, shares[1:], strict=True))


def _priorities_and_ranks(
    state: State,
    parent: Queue | None,
    child_ids: Sequence[str],
    ranks: _Ranks,
) -> tuple[list[int], list[int]]:
    """The over-quota priority and configuration rank of each claimant of a level, in the
    order of its inputs: under a parent, its own jobs first (priority 0, ranked first)."""
    priorities = [state.queues[q].priority for q in child_ids]
    ranked = [ranks[q] for q in child_ids]
    if parent is not None:
        return [0, *priorities], [-1, *ranked]
    return priorities, ranked


def _inputs(queue: Queue) -> Inputs:
    quota = queue.quota
    return (
        queue.capped_demand,
        (float(quota.quota[0]), float(quota.quota[1]), float(quota.quota[2])),
        quota.weight,
    )


def _own_inputs(parent: Queue, own_quota: tuple[int, int, int]) -> Inputs:
    demand = parent.demand.as_tuple()
    weights = [1.0 if q in (0, UNLIMITED) else float(q) for q in own_quota]
    return (
        (float(demand[0]), float(demand[1]), float(demand[2])),
        (float(own_quota[0]), float(own_quota[1]), float(own_quota[2])),
        (weights[0], weights[1], weights[2]),
    )


def _still_served(memo: LevelMemo, inputs: dict[str, Inputs]) -> bool:
    """Whether the level, last served in full, still is with the changed claimants' new
    inputs (the others' are unchanged); if so, the memo takes the new caps."""
    totals = list(memo.totals)
    for ident, (caps, quotas, weights) in inputs.items():
        old = memo.caps[ident]
        for r in range(3):
            if not served_alone(UNITS[r], caps[r], quotas[r], weights[r]):
                return False
            totals[r] += int(caps[r]) - int(old[r])
    if any(totals[r] > memo.amount[r] for r in range(3)):
        return False
    memo.totals = totals
    for ident, (caps, _, _) in inputs.items():
        memo.caps[ident] = caps
    return True
