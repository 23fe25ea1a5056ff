"""A level shared over columns (lists per resource) gives bit for bit what the sharing over
one Claimant object per claimant gave: the same float operations in the same order, so fair
shares, and every decision that reads them, stay the same."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.fairshare import UNITS, Claimant, share_level
from domain.quota import UNLIMITED
from tests.domain.test_fairshare_fast_path import levels


def reference_fill(amount: float, claimants: list[Claimant], weights: list[float]) -> float:
    """The reference model: the water-filling over Claimant objects, as it was written."""
    active = [
        (c.cap - c.given) / w if w > 0 else float("inf")
        for c, w in zip(claimants, weights, strict=True)
    ]
    order = sorted(range(len(claimants)), key=lambda i: (active[i], claimants[i].ident))
    total_weight, used, left = sum(weights[i] for i in order), 0.0, amount
    for position, index in enumerate(order):
        if total_weight <= 0 or left <= 1e-9:
            break
        claimant = claimants[index]
        want, level = claimant.cap - claimant.given, left / total_weight
        if want > weights[index] * level:
            for rest in order[position:]:
                part = weights[rest] * level
                claimants[rest].given += part
                used += part
            return used
        claimant.given += want
        used, left, total_weight = used + want, left - want, total_weight - weights[index]
    return used


def reference_share(amount: float, claimants: list[Claimant], unit: float) -> list[float]:
    """The reference model of a level: deserved, spare by priority and weight, whole units."""
    deserved = [c.cap if c.quota == UNLIMITED else min(c.quota, c.cap) for c in claimants]
    if sum(deserved) <= amount:
        for claimant, want in zip(claimants, deserved, strict=True):
            claimant.given = want
    else:
        capped = [
            replace(c, cap=want, given=0.0) for c, want in zip(claimants, deserved, strict=True)
        ]
        reference_fill(amount, capped, [max(want, 1e-9) for want in deserved])
        for claimant, result in zip(claimants, capped, strict=True):
            claimant.given = result.given
    spare = amount - sum(c.given for c in claimants)
    for priority in sorted({c.priority for c in claimants}, reverse=True):
        if spare <= 1e-9:
            break
        weighted = [
            c
            for c in claimants
            if c.priority == priority and c.cap - c.given > 1e-9 and c.weight > 0
        ]
        if weighted:
            spare -= reference_fill(spare, weighted, [c.weight for c in weighted])
    idle = [c for c in claimants if c.weight == 0 and c.cap - c.given > 1e-9]
    if idle and spare > 1e-9:
        reference_fill(spare, idle, [1.0] * len(idle))
    if unit > 0 and claimants:
        total = sum(c.given for c in claimants) / unit
        floors = [math.floor(c.given / unit + 1e-6) for c in claimants]
        left = math.ceil(total - 1e-6) - sum(floors)
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
        return [count * unit for count in floors]
    return [c.given for c in claimants]


@st.composite
def ragged_levels(draw: st.DrawFn) -> tuple[float, float, list[Claimant]]:
    """Levels of any floats (so every water-filling step rounds) or of thirds (so remainders
    tie), with ids in no particular order and ranks that tie: every tie-break is exercised."""
    unit = draw(st.sampled_from([UNITS[0], 1.0, 0.0]))
    amounts = st.one_of(
        st.floats(0.0, 5e4, allow_nan=False), st.integers(0, 60).map(lambda n: n * unit / 3)
    )
    count = draw(st.integers(1, 12))
    idents = draw(st.permutations([f"c{index:02d}" for index in range(count)]))
    claimants = [
        Claimant(
            ident,
            draw(st.one_of(st.just(float(UNLIMITED)), amounts)),
            draw(amounts),
            draw(st.sampled_from([0.0, 0.25, 1.0, 1.0, 3.0, 7.5])),
            draw(st.integers(0, 2)),
            rank=draw(st.integers(0, 3)),
        )
        for ident in idents
    ]
    return draw(amounts), unit, claimants


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(levels(), ragged_levels()))
def test_columns_share_exactly_as_the_claimant_objects_did(
    level: tuple[float, float, list[Claimant]],
) -> None:
    amount, unit, claimants = level
    expected = reference_share(amount, [replace(c) for c in claimants], unit)
    share_level(amount, claimants, unit)
    assert [c.given for c in claimants] == expected
