"""The scheduler's garbage collection policy: a full pass freezes what lives; the next full
pass comes only when the period is up, and finds the garbage cycles made meanwhile."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streams.gc_policy import CollectorPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def restored_collector() -> Iterator[None]:
    """Leaves the test process's collector as it found it (nothing frozen)."""
    yield
    gc.unfreeze()
    gc.collect()


class Cyclic:
    def __init__(self) -> None:
        self.me = self


def test_what_lives_at_a_full_pass_is_frozen_out_of_later_passes(
    restored_collector: None,
) -> None:
    policy = CollectorPolicy(period_s=600, clock=Clock())
    kept = Cyclic()
    assert any(item is kept for item in gc.get_objects())

    policy.settle()

    # Frozen objects are in no generation: no pass walks them.
    assert not any(item is kept for item in gc.get_objects())
    assert gc.get_freeze_count() > 0


def test_garbage_cycles_among_frozen_objects_wait_for_the_next_period(
    restored_collector: None,
) -> None:
    clock = Clock()
    policy = CollectorPolicy(period_s=600, clock=clock)
    doomed = [Cyclic() for _ in range(50)]
    watched = [weakref.ref(item) for item in doomed]
    policy.settle()
    del doomed  # now garbage cycles, but frozen: no ordinary pass looks at them

    clock.now = 599.0
    assert not policy.after_step()
    gc.collect()
    assert all(ref() is not None for ref in watched)

    clock.now = 600.0
    assert policy.after_step()  # the period is up: handed back, collected, refrozen
    assert all(ref() is None for ref in watched)
    assert policy.full_passes == 2


def test_the_first_step_runs_a_full_pass_when_none_ran(restored_collector: None) -> None:
    policy = CollectorPolicy(period_s=600, clock=Clock())
    assert policy.after_step()
    assert not policy.after_step()
    assert policy.full_passes == 1
