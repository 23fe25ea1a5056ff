"""The shortcuts of fair share (a level served in full, checked again only for its changed
claimants) equal the full sharing from scratch."""

from __future__ import annotations

import copy
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from domain import fairshare
from domain.fairshare import UNITS, Claimant, share_level
from domain.fairshare_level import served_in_full
from domain.quota import UNLIMITED
from domain.state import State
from tests.domain.test_fairness_properties import PROPERTY, changes, fold_all, loaded_clusters


@st.composite
def levels(draw: st.DrawFn) -> tuple[float, float, list[Claimant]]:
    """One level: whole numbers mostly, caps often in whole units, room often to spare."""
    unit = draw(st.sampled_from([UNITS[0], 1.0]))
    count = draw(st.integers(1, 8))
    claimants = []
    for index in range(count):
        cap = draw(st.integers(0, 40)) * unit + draw(st.sampled_from([0.0, 0.0, 0.0, 0.5, 7.0]))
        quota = draw(st.sampled_from([UNLIMITED, 0, 1, 3, 10, 40])) * unit
        weight = draw(st.sampled_from([1.0, 1.0, 0.0, 2.0, 0.5, 3.0]))
        priority = draw(st.sampled_from([0, 0, 1]))
        claimants.append(Claimant(f"c{index}", quota, cap, weight, priority, rank=index))
    total = sum(c.cap for c in claimants)
    amount = draw(st.sampled_from([total, total + unit, total * 3, total / 2, total - 1.0]))
    return max(amount, 0.0), unit, claimants


@PROPERTY
@given(levels())
def test_served_in_full_only_when_sharing_gives_every_cap(
    level: tuple[float, float, list[Claimant]],
) -> None:
    amount, unit, claimants = level
    fast = served_in_full(
        amount,
        unit,
        [c.cap for c in claimants],
        [c.quota for c in claimants],
        [c.weight for c in claimants],
    )
    share_level(amount, claimants, unit)
    if fast:
        assert [c.given for c in claimants] == [c.cap for c in claimants]


def test_a_level_with_room_for_every_demand_takes_the_shortcut() -> None:
    gpu = UNITS[0]
    assert served_in_full(40 * gpu, gpu, [3 * gpu, 5 * gpu], [UNLIMITED, 2 * gpu], [2.0, 1.0])
    # Not whole devices, not enough room, or a weight other than 1 or 0 over quota: share.
    assert not served_in_full(40 * gpu, gpu, [3.5 * gpu], [0.0], [1.0])
    assert not served_in_full(7 * gpu, gpu, [3 * gpu, 5 * gpu], [UNLIMITED, UNLIMITED], [1, 1])
    assert not served_in_full(40 * gpu, gpu, [3 * gpu], [gpu], [2.0])


@PROPERTY
@given(st.data())
def test_incremental_shares_with_the_shortcut_equal_full_sharing_from_scratch(
    data: st.DataObject,
) -> None:
    state, seq = data.draw(loaded_clusters())
    fairshare.recompute(state)
    names = sorted(state.queues)
    if not names:
        return
    for change in data.draw(changes(names)):
        seq = fold_all(state, [change], seq)
        fairshare.recompute(state)
        reference = _from_scratch_without_shortcut(state)
        for name, queue in state.queues.items():
            other = reference.queues[name]
            assert queue.fair_share == other.fair_share, name
            assert queue.own_fair_share == other.own_fair_share, name


def _from_scratch_without_shortcut(state: State) -> State:
    fresh = copy.deepcopy(state)
    for queue in fresh.queues.values():
        queue.fair_share = queue.own_fair_share = queue.capped_demand = (0.0, 0.0, 0.0)
    with mock.patch.object(fairshare, "served_in_full", lambda *args: False):
        fairshare.recompute(fresh, full=True)
    return fresh
