"""The core makes no reference cycles: a finished scheduling cycle is freed by reference
counting alone, so the cyclic garbage collector's passes (which walk the whole state) have
nothing of the core's to find (scenario files run through the Simulator)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from domain.simulation import Simulator

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.jsonl"))


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: path.stem)
def test_a_scenario_leaves_no_cyclic_garbage(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    with collector_off():
        simulator = Simulator()
        outputs = list(simulator.run(lines))
        unreachable = gc.collect()
    assert outputs
    assert unreachable == 0
