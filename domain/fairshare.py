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


EXACT_MAX = float(2**52)  # integers below this add and subtract exactly as floats


def served_in_full(
    amount: float,
    unit: float,
    caps: list[float],
    quotas: list[float],
    weights: list[float],
) -> bool:
    """True when share_level(amount, claimants, unit) gives every claimant exactly its cap,
    proven without sharing: whole numbers (caps whole units), the caps add up to at most
    `amount`, and every claimant that wants beyond its quota has over-quota weight 1 or 0.

    Then the deserved stage gives each min(quota, cap), and each water-filling round serves
    the smallest remaining want in full: it is at most the remaining amount over the number of
    claimants (their wants add up to at most that), and a correctly rounded division never
    falls below a whole number it is mathematically at least; weights of 1 multiply exactly,
    and whole numbers add and subtract exactly. Whole-unit caps are already whole units, so
    rounding keeps them. Weights other than 1 or 0 are left to the full computation.
    """
    if not (0.0 <= amount < EXACT_MAX) or amount % 1.0:
        return False
    total = 0.0
    for cap, quota, weight in zip(caps, quotas, weights, strict=True):
        if cap < 0.0 or (cap % unit if unit > 0 else cap % 1.0):
            return False
        if quota != UNLIMITED and (
            quota < 0.0 or quota % 1.0 or (quota < cap and weight != 1.0 and weight != 0.0)
        ):
            return False
        total += cap
    return total <= amount


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
    top = [state.queues[q] for q in state.top_level_queues()]
    ranks = _Ranks(state)
    columns = [_share_column(float(capacity[r]), None, top, r, ranks) for r in range(3)]
    work = [(q.id, (a, b, c)) for q, a, b, c in zip(top, *columns, strict=True)]
    while work:
        queue_id, share = work.pop()
        work.extend(_descend(state, queue_id, share, touched, ranks))
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
    ranks: _Ranks,
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
    columns = [_share_column(share[r], (queue, own_quota[r]), children, r, ranks) for r in range(3)]
    queue.own_fair_share = (columns[0][0], columns[1][0], columns[2][0])
    return [
        (child.id, (a, b, c))
        for child, a, b, c in zip(
            children, columns[0][1:], columns[1][1:], columns[2][1:], strict=True
        )
    ]


class _Ranks:
    """Configuration order of the queues, built only when a level needs the full sharing."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._rank: dict[str, int] | None = None

    def __getitem__(self, queue_id: str) -> int:
        if self._rank is None:
            self._rank = {q: position for position, q in enumerate(self._state.queues)}
        return self._rank[queue_id]


def _share_column(
    amount: float, own: tuple[Queue, int] | None, queues: list[Queue], r: int, ranks: _Ranks
) -> list[float]:
    """One level's shares of resource r: the parent's own jobs first (when `own` is given),
    then each queue; every claimant's cap when that is provably the outcome (served_in_full)."""
    caps = [q.capped_demand[r] for q in queues]
    quotas = [float(q.quota.quota[r]) for q in queues]
    weights = [q.quota.weight[r] for q in queues]
    if own is not None:
        parent, own_quota = own
        caps.insert(0, float(parent.demand.as_tuple()[r]))
        quotas.insert(0, float(own_quota))
        weights.insert(0, 1.0 if own_quota in (0, UNLIMITED) else float(own_quota))
    if served_in_full(amount, UNITS[r], caps, quotas, weights):
        return caps
    claimants = [] if own is None else [_own_claimant(own[0], r, own[1])]
    claimants += [_claimant(q, r, ranks[q.id]) for q in queues]
    share_level(amount, claimants, UNITS[r])
    return [c.given for c in claimants]
