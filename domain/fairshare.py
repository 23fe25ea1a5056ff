"""Fair share per resource down the queue tree: deserved quota, then spare capacity by
over-quota priority and weight, water-filled and capped by demand and limit (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from domain.quota import UNLIMITED
from domain.resources import GPU_SCALE
from domain.state import Queue, State

OWN = ""  # the slot of a queue's own jobs among its children (sorts before any queue id)
# Shares are whole units: GPU devices (KAI), millicores, MB; internal units per resource.
UNITS = (float(GPU_SCALE), 1.0, 1.0)


@dataclass(slots=True)
class Claimant:
    """One participant at a level of the tree: a child queue, or the parent's own jobs."""

    ident: str
    quota: float  # deserved, UNLIMITED allowed
    cap: float  # demand capped by limit
    weight: float
    priority: int
    rank: int = 0  # configuration order: the tie-break of whole-unit rounding, then ident
    given: float = 0.0


def water_fill(amount: float, claimants: list[Claimant], weights: list[float]) -> float:
    """Shares `amount` in proportion to weights, never past a claimant's cap; returns what is used."""
    active = [
        (c.cap - c.given) / w if w > 0 else float("inf")
        for c, w in zip(claimants, weights, strict=True)
    ]
    order = sorted(range(len(claimants)), key=lambda i: (active[i], claimants[i].ident))
    total_weight = sum(weights[i] for i in order)
    used = 0.0
    left = amount
    for position, index in enumerate(order):
        if total_weight <= 0 or left <= 1e-9:
            break
        claimant = claimants[index]
        want = claimant.cap - claimant.given
        level = left / total_weight
        if want <= weights[index] * level:
            share = want
        else:
            # Everyone from here on is capped above the current level: give each its weight's part.
            for rest in order[position:]:
                part = weights[rest] * level
                claimants[rest].given += part
                used += part
            return used
        claimant.given += share
        used += share
        left -= share
        total_weight -= weights[index]
    return used


def whole_units(claimants: list[Claimant], unit: float) -> None:
    """Rounds the shares to whole units by largest remainder, as KAI does for GPUs: each
    claimant keeps the floor of its share, and the units left over (what the exact shares add
    up to, rounded up) go one at a time to the largest remainders; ties go to the claimant
    configured first, then by id. E.g. 3.4 and 7.6 of 11 give 3 and 8."""
    total = sum(c.given for c in claimants) / unit
    units = math.ceil(total - 1e-6)
    floors = [math.floor(c.given / unit + 1e-6) for c in claimants]
    left = units - sum(floors)
    order = sorted(
        range(len(claimants)),
        key=lambda i: (
            -round(claimants[i].given / unit - floors[i], 6),
            claimants[i].rank,
            claimants[i].ident,
        ),
    )
    for index in order[: max(left, 0)]:
        floors[index] += 1
    for claimant, count in zip(claimants, floors, strict=True):
        claimant.given = count * unit


def share_level(amount: float, claimants: list[Claimant], unit: float = 0.0) -> None:
    """Deserved quota first, then spare by over-quota priority (higher first) and weight;
    with a `unit`, the results are then whole units (whole_units)."""
    _share_exact(amount, claimants)
    if unit > 0 and claimants:
        whole_units(claimants, unit)


def _share_exact(amount: float, claimants: list[Claimant]) -> None:
    deserved = [c.cap if c.quota == UNLIMITED else min(c.quota, c.cap) for c in claimants]
    if sum(deserved) <= amount:
        for claimant, want in zip(claimants, deserved, strict=True):
            claimant.given = want
    else:
        capped = [
            Claimant(c.ident, c.quota, want, c.weight, c.priority, c.rank)
            for c, want in zip(claimants, deserved, strict=True)
        ]
        water_fill(amount, capped, [max(want, 1e-9) for want in deserved])
        for claimant, result in zip(claimants, capped, strict=True):
            claimant.given = result.given
    spare = amount - sum(c.given for c in claimants)
    for priority in sorted({c.priority for c in claimants}, reverse=True):
        if spare <= 1e-9:
            return
        wanting = [c for c in claimants if c.priority == priority and c.cap - c.given > 1e-9]
        weighted = [c for c in wanting if c.weight > 0]
        if weighted:
            spare -= water_fill(spare, weighted, [c.weight for c in weighted])
    # Weight 0 means no share of spare capacity while others want it; what nobody else wants
    # is shared equally among them.
    idle = [c for c in claimants if c.weight == 0 and c.cap - c.given > 1e-9]
    if idle and spare > 1e-9:
        water_fill(spare, idle, [1.0] * len(idle))


def recompute(state: State, full: bool = False) -> None:
    """Sets fair_share and own_fair_share from capacity, configuration and demand.

    Incremental: only queues whose own demand or configuration changed (state.fair_share_dirty)
    and their ancestors are re-aggregated, and a level is re-shared only where its inputs may
    have changed: a subtree whose share from above is unchanged and in which nothing changed
    keeps every result, since the results are a deterministic function of exactly those
    inputs. The outcome is therefore identical to a full walk (`full=True`).
    """
    full = full or state.fair_share_full
    touched = set(state.queues) if full else _with_ancestors(state, state.fair_share_dirty)
    for queue_id in _deepest_first(state, touched):
        _aggregate(state, state.queues[queue_id])
    capacity = state.capacity.as_tuple()
    top = state.top_level_queues()
    shares: list[list[float]] = [[0.0, 0.0, 0.0] for _ in top]
    rank = {queue_id: position for position, queue_id in enumerate(state.queues)}
    for r in range(3):
        claimants = [_claimant(state.queues[q], r, rank[q]) for q in top]
        share_level(float(capacity[r]), claimants, UNITS[r])
        for i, claimant in enumerate(claimants):
            shares[i][r] = claimant.given
    work = [(q, (s[0], s[1], s[2])) for q, s in zip(top, shares, strict=True)]
    while work:
        queue_id, share = work.pop()
        work.extend(_descend(state, queue_id, share, touched, rank))
    state.fair_share_dirty.clear()
    state.fair_share_full = False
    state.fair_share_stale = False


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


def _claimant(queue: Queue, r: int, rank: int) -> Claimant:
    quota = queue.quota.quota[r]
    return Claimant(
        queue.id, float(quota), queue.capped_demand[r], queue.quota.weight[r], queue.priority, rank
    )


def _own_claimant(queue: Queue, r: int, own_quota: int) -> Claimant:
    quota = float(own_quota)
    weight = 1.0 if own_quota in (0, UNLIMITED) else quota
    return Claimant(OWN, quota, float(queue.demand.as_tuple()[r]), weight, 0, -1)


def _descend(
    state: State,
    queue_id: str,
    share: tuple[float, float, float],
    touched: set[str],
    rank: dict[str, int],
) -> list[tuple[str, tuple[float, float, float]]]:
    """Sets one queue's shares; returns its children with theirs, or nothing when unchanged."""
    queue = state.queues[queue_id]
    if queue_id not in touched and queue.fair_share == share:
        return []
    queue.fair_share = share
    if not queue.children:
        queue.own_fair_share = share
        return []
    children = [state.queues[c] for c in queue.children]
    own_quota = queue.quota.own_quota([c.quota for c in children])
    child_shares: list[list[float]] = [[0.0, 0.0, 0.0] for _ in children]
    own = [0.0, 0.0, 0.0]
    for r in range(3):
        claimants = [_own_claimant(queue, r, own_quota[r])]
        claimants += [_claimant(c, r, rank[c.id]) for c in children]
        share_level(share[r], claimants, UNITS[r])
        own[r] = claimants[0].given
        for i, claimant in enumerate(claimants[1:]):
            child_shares[i][r] = claimant.given
    queue.own_fair_share = (own[0], own[1], own[2])
    return [
        (child.id, (cs[0], cs[1], cs[2])) for child, cs in zip(children, child_shares, strict=True)
    ]
