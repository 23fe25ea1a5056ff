"""Allocate's queue keys, each level made once per allocation epoch by one QueueKeys kept
for the run, equal the keys made afresh (queue_key: a new QueueKeys for each key) for every
queue of generated trees, after every cycle."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings

from domain.cycle.ordering import QueueKeys, queue_key
from domain.simulation import Simulator
from tests.domain.test_reclaim_properties import scenarios


class KeyChecking(Simulator):
    """After every cycle, keys every queue at a new epoch, with one QueueKeys for the run:
    levels made at an earlier epoch must not be read again."""

    def __init__(self) -> None:
        super().__init__()
        self.cycles = 0
        self.keys = QueueKeys(self.state)  # the simulator folds into this one State

    def _cycle_and_answer(self, ts: int) -> None:
        super()._cycle_and_answer(ts)
        self.cycles += 1
        for queue_id in sorted(self.state.queues):
            assert self.keys.key(queue_id, self.cycles) == queue_key(self.state, queue_id)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_keys_made_once_per_level_equal_keys_made_afresh(lines: list[dict[str, Any]]) -> None:
    simulator = KeyChecking()
    for _ in simulator.run(orjson.dumps(line) for line in lines):
        pass
    assert simulator.cycles > 0
