"""Fair share per resource down the queue tree: deserved quota, then spare capacity by
over-quota priority and weight, water-filled and capped by demand and limit (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from domain.quota import UNLIMITED
from domain.state import Queue, State

OWN = ""  # the slot of a queue's own jobs among its children (sorts before any queue id)


@dataclass(slots=True)
class Claimant:
    """One participant at a level of the tree: a child queue, or the parent's own jobs."""

    ident: str
    quota: float  # deserved, UNLIMITED allowed
    cap: float  # demand capped by limit
    weight: float
    priority: int
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


def share_level(amount: float, claimants: list[Claimant]) -> None:
    """Deserved quota first, then spare by over-quota priority (higher first) and weight."""
    deserved = [c.cap if c.quota == UNLIMITED else min(c.quota, c.cap) for c in claimants]
    if sum(deserved) <= amount:
        for claimant, want in zip(claimants, deserved, strict=True):
            claimant.given = want
    else:
        capped = [
            Claimant(c.ident, c.quota, want, c.weight, c.priority)
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


def recompute(state: State) -> None:
    """Sets every queue's fair_share and own_fair_share from capacity, config and demand."""
    demand: dict[str, tuple[float, float, float]] = {}
    for queue_id in _bottom_up(state):
        queue = state.queues[queue_id]
        totals: list[float] = [float(x) for x in queue.demand.as_tuple()]
        for child_id in queue.children:
            child = demand[child_id]
            for r in range(3):
                totals[r] += child[r]
        demand[queue_id] = (
            _capped(queue, 0, totals[0]),
            _capped(queue, 1, totals[1]),
            _capped(queue, 2, totals[2]),
        )
    capacity = state.capacity.as_tuple()
    top = state.top_level_queues()
    shares: list[list[float]] = [[0.0, 0.0, 0.0] for _ in top]
    for r in range(3):
        claimants = [_claimant(state.queues[q], r, demand[q][r]) for q in top]
        share_level(float(capacity[r]), claimants)
        for i, claimant in enumerate(claimants):
            shares[i][r] = claimant.given
    for queue_id, share in zip(top, shares, strict=True):
        _descend(state, queue_id, share, demand)
    state.fair_share_stale = False


def _capped(queue: Queue, r: int, amount: float) -> float:
    cap = queue.quota.limit[r]
    return amount if cap is None else min(amount, float(cap))


def _claimant(queue: Queue, r: int, demand: float) -> Claimant:
    quota = queue.quota.quota[r]
    return Claimant(queue.id, float(quota), demand, queue.quota.weight[r], queue.priority)


def _own_claimant(queue: Queue, r: int, children_quota: float) -> Claimant:
    quota = queue.quota.quota[r]
    own_quota = float(UNLIMITED) if quota == UNLIMITED else max(0.0, quota - children_quota)
    weight = 1.0 if own_quota in (0.0, float(UNLIMITED)) else own_quota
    return Claimant(OWN, own_quota, float(queue.demand.as_tuple()[r]), weight, 0)


def _descend(
    state: State, queue_id: str, share: list[float], demand: dict[str, tuple[float, float, float]]
) -> None:
    queue = state.queues[queue_id]
    queue.fair_share = (share[0], share[1], share[2])
    if not queue.children:
        queue.own_fair_share = queue.fair_share
        return
    child_shares: list[list[float]] = [[0.0, 0.0, 0.0] for _ in queue.children]
    own = [0.0, 0.0, 0.0]
    for r in range(3):
        children = [state.queues[c] for c in queue.children]
        quotas = sum(max(0, c.quota.quota[r]) for c in children)
        claimants = [_own_claimant(queue, r, quotas)]
        claimants += [_claimant(c, r, demand[c.id][r]) for c in children]
        share_level(share[r], claimants)
        own[r] = claimants[0].given
        for i, claimant in enumerate(claimants[1:]):
            child_shares[i][r] = claimant.given
    queue.own_fair_share = (own[0], own[1], own[2])
    for child_id, child_share in zip(queue.children, child_shares, strict=True):
        _descend(state, child_id, child_share, demand)


def _bottom_up(state: State) -> list[str]:
    order: list[str] = []

    def visit(queue_id: str) -> None:
        for child in state.queues[queue_id].children:
            visit(child)
        order.append(queue_id)

    for top in state.top_level_queues():
        visit(top)
    return order
