"""The scheduler's garbage collection: its state frozen out of collections between periodic full passes (impure: the process's collector).

CPython's cyclic collector walks every tracked object in a full (oldest generation) pass:
with 100,000 pending jobs about a third of a second, taken in the middle of whichever cycle
triggers it (`bench/scale_bench.py`: the p99 cycle was that pass, not scheduling). The core
makes no reference cycles (tests/domain/test_no_cyclic_garbage.py), so what it keeps is freed
by reference counting and the collector only ever finds other layers' garbage. So after a
full pass everything still alive is frozen (`gc.freeze`): later passes walk only what was
allocated since. Once per `period_s` the frozen objects are handed back and one full pass
runs, so garbage cycles among them (the Kafka client's, say) wait at most that long and
memory never grows with the time the scheduler has been running.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

__all__ = ["FULL_PASS_S", "CollectorPolicy"]

log = logging.getLogger("quotaflow.gc")

FULL_PASS_S = 600.0  # one full collection every 10 minutes; others walk only newer objects


class CollectorPolicy:
    """Freezes what survives a full collection; runs one every `period_s`."""

    def __init__(
        self, period_s: float = FULL_PASS_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.period_s = period_s
        self._clock = clock
        self._last: float | None = None
        self.full_passes = 0

    def settle(self) -> float:
        """One full collection over everything, then everything alive is frozen; returns
        the seconds it took (logged: it is the pause the other passes no longer take)."""
        started = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        took = time.perf_counter() - started
        self._last = self._clock()
        self.full_passes += 1
        log.debug(
            "full collection: %d unreachable, %d frozen, %.0f ms",
            found,
            gc.get_freeze_count(),
            took * 1000,
        )
        return took

    def after_step(self) -> bool:
        """Called after each step: a full pass when the period is up (or none ran yet)."""
        if self._last is not None and self._clock() - self._last < self.period_s:
            return False
        self.settle()
        return True
