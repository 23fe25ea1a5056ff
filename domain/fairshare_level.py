"""One level of fair share: a parent's amount of one resource shared among its claimants by
deserved quota, then spare capacity by over-quota priority and weight, water-filled and
capped by demand and limit, in whole units (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from domain.quota import UNLIMITED
from domain.resources import GPU_SCALE

# Shares are whole units: GPU devices (KAI), millicores, MB; internal units per resource.
UNITS = (float(GPU_SCALE), 1.0, 1.0)
EXACT_MAX = float(2**52)  # integers below this add and subtract exactly as floats


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
    if not whole_amount(amount):
        return False
    total = 0.0
    for cap, quota, weight in zip(caps, quotas, weights, strict=True):
        if not served_alone(unit, cap, quota, weight):
            return False
        total += cap
    return total <= amount


def whole_amount(amount: float) -> bool:
    """served_in_full's test of the amount shared: a whole number, small enough to be exact."""
    return 0.0 <= amount < EXACT_MAX and not amount % 1.0


def served_alone(unit: float, cap: float, quota: float, weight: float) -> bool:
    """served_in_full's test of one claimant: a cap in whole units, and a whole quota and a
    weight of 1 or 0 if it wants beyond its quota."""
    if cap < 0.0 or cap >= EXACT_MAX or (cap % unit if unit > 0 else cap % 1.0):
        return False
    return quota == UNLIMITED or not (
        quota < 0.0 or quota % 1.0 or (quota < cap and weight != 1.0 and weight != 0.0)
    )


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


@dataclass(slots=True)
class LevelMemo:
    """A level of the tree last shared with every claimant served in full (served_in_full),
    with what it shared and each claimant's caps: a change to a few claimants is then checked
    against the others' caps and total without reading them again."""

    amount: tuple[float, float, float]
    ids: tuple[str, ...]  # the claimants in order (OWN first under a parent)
    caps: dict[str, tuple[float, float, float]]
    totals: list[int]  # the caps added up, per resource (whole numbers, exact)
