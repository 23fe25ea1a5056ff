"""One level of fair share: a parent's amount of one resource shared among its claimants by
deserved quota, then spare capacity by over-quota priority and weight, water-filled and
capped by demand and limit, in whole units (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from domain.quota import UNLIMITED
from domain.resources import GPU_SCALE

# Shares are whole units: GPU devices (KAI), millicores, MB; internal units per resource.
UNITS = (float(GPU_SCALE), 1.0, 1.0)
EXACT_MAX = float(2**52)  # integers below this add and subtract exactly as floats
_INFINITY = float("inf")


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


class Column:
    """One resource of one level as parallel lists, in claimant order: what the sharing reads
    of each claimant (Claimant's fields), without an object per claimant and resource."""

    __slots__ = ("caps", "idents", "priorities", "quotas", "ranks", "weights")

    def __init__(
        self,
        idents: Sequence[str],
        quotas: Sequence[float],
        caps: Sequence[float],
        weights: Sequence[float],
        priorities: Sequence[int],
        ranks: Sequence[int],
    ) -> None:
        self.idents, self.quotas, self.caps = idents, quotas, caps
        self.weights, self.priorities, self.ranks = weights, priorities, ranks


def share_column(amount: float, column: Column, unit: float = 0.0) -> list[float]:
    """What each claimant is given: deserved quota first, then spare by over-quota priority
    (higher first) and weight, water-filled and capped; with a `unit`, in whole units."""
    given = _share_exact(amount, column)
    if unit > 0 and given:
        return _whole_units(given, unit, column.ranks, column.idents)
    return given


def share_level(amount: float, claimants: list[Claimant], unit: float = 0.0) -> None:
    """share_column over Claimant objects: sets each one's `given`."""
    column = Column(
        [c.ident for c in claimants],
        [c.quota for c in claimants],
        [c.cap for c in claimants],
        [c.weight for c in claimants],
        [c.priority for c in claimants],
        [c.rank for c in claimants],
    )
    for claimant, share in zip(claimants, share_column(amount, column, unit), strict=True):
        claimant.given = share


def whole_units(claimants: list[Claimant], unit: float) -> None:
    """Rounds the claimants' `given` to whole units (see _whole_units)."""
    given = [c.given for c in claimants]
    rounded = _whole_units(given, unit, [c.rank for c in claimants], [c.ident for c in claimants])
    for claimant, share in zip(claimants, rounded, strict=True):
        claimant.given = share


def _water_fill(
    amount: float,
    members: list[int],
    weights: list[float],
    given: list[float],
    caps: Sequence[float],
    idents: Sequence[str],
) -> float:
    """Shares `amount` among `members` (indexes into `given` and `caps`) in proportion to
    `weights` (one per member), never past a cap; adds to `given`, returns what is used."""
    active = [
        (caps[m] - given[m]) / w if w > 0 else _INFINITY
        for m, w in zip(members, weights, strict=True)
    ]
    order = sorted(range(len(members)), key=lambda k: (active[k], idents[members[k]]))
    total_weight = sum(weights[k] for k in order)
    used = 0.0
    left = amount
    for position, k in enumerate(order):
        if total_weight <= 0 or left <= 1e-9:
            break
        index = members[k]
        want = caps[index] - given[index]
        level = left / total_weight
        if want <= weights[k] * level:
            share = want
        else:
            # Everyone from here on is capped above the current level: give each its weight's part.
            for rest in order[position:]:
                part = weights[rest] * level
                given[members[rest]] += part
                used += part
            return used
        given[index] += share
        used += share
        left -= share
        total_weight -= weights[k]
    return used


def _whole_units(
    given: list[float], unit: float, ranks: Sequence[int], idents: Sequence[str]
) -> list[float]:
    """Rounds the shares to whole units by largest remainder, as KAI does for GPUs: each
    claimant keeps the floor of its share, and the units left over (what the exact shares add
    up to, rounded up) go one at a time to the largest remainders; ties go to the claimant
    configured first, then by id. E.g. 3.4 and 7.6 of 11 give 3 and 8."""
    total = sum(given) / unit
    units = math.ceil(total - 1e-6)
    floors = [math.floor(share / unit + 1e-6) for share in given]
    left = units - sum(floors)
    if left > 0:
        remainders = [
            round(share / unit - floor, 6) for share, floor in zip(given, floors, strict=True)
        ]
        order = sorted(range(len(given)), key=lambda i: (-remainders[i], ranks[i], idents[i]))
        for index in order[:left]:
            floors[index] += 1
    return [count * unit for count in floors]


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
    # The caps' total first: on a contended level (shared again at most submissions) it
    # alone says no, before any claimant is looked at.
    if not whole_amount(amount) or sum(caps) > amount:
        return False
    return all(
        served_alone(unit, cap, quota, weight)
        for cap, quota, weight in zip(caps, quotas, weights, strict=True)
    )


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


def _share_exact(amount: float, column: Column) -> list[float]:
    quotas, caps, weights = column.quotas, column.caps, column.weights
    priorities, idents = column.priorities, column.idents
    everyone = list(range(len(caps)))
    deserved = [
        cap if quota == UNLIMITED else min(quota, cap)
        for quota, cap in zip(quotas, caps, strict=True)
    ]
    if sum(deserved) <= amount:
        given = list(deserved)
    else:
        given = [0.0] * len(caps)
        _water_fill(
            amount, everyone, [max(want, 1e-9) for want in deserved], given, deserved, idents
        )
    spare = amount - sum(given)
    for priority in sorted(set(priorities), reverse=True):
        if spare <= 1e-9:
            return given
        weighted = [
            i
            for i in everyone
            if priorities[i] == priority and caps[i] - given[i] > 1e-9 and weights[i] > 0
        ]
        if weighted:
            spare -= _water_fill(
                spare, weighted, [weights[i] for i in weighted], given, caps, idents
            )
    # Weight 0 means no share of spare capacity while others want it; what nobody else wants
    # is shared equally among them.
    idle = [i for i in everyone if weights[i] == 0 and caps[i] - given[i] > 1e-9]
    if idle and spare > 1e-9:
        _water_fill(spare, idle, [1.0] * len(idle), given, caps, idents)
    return given


@dataclass(slots=True)
class LevelMemo:
    """A level of the tree last shared with every claimant served in full (served_in_full),
    with what it shared and each claimant's caps: a change to a few claimants is then checked
    against the others' caps and total without reading them again."""

    amount: tuple[float, float, float]
    ids: tuple[str, ...]  # the claimants in order (OWN first under a parent)
    caps: dict[str, tuple[float, float, float]]
    totals: list[int]  # the caps added up, per resource (whole numbers, exact)
