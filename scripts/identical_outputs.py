"""Writes the outputs that a behaviour-preserving change must leave byte-identical (not pure: files).

    python scripts/identical_outputs.py ROOT OUT

ROOT is a checkout of QuotaFlow (the tree under test), OUT an empty folder. Written there:
- `simulate/<scenario>.out`: `quotaflow simulate` over every tests/scenarios/**/*.jsonl, run
  as the real CLI of ROOT (its pyproject's entry point), with its exit status and stderr;
- `core/*.jsonl`: every command of a reduced bench/core_bench workload (a full cluster with
  long mixed-policy queues, then finishes), with policies only and with every plug-in, and
  each queue's pending view afterwards;
- `preemption/*.jsonl`: a reduced bench/preemption_bench run (reclaim and self_level);
- `replay/*`: a synthetic sequencer journal (bench/replay_bench's seeded inputs), the commands
  a replay of it emits, and the pending views at its end;
- `schema.json`: `quotaflow schema`, the JSON Schema of every event and command.
`scripts/check_identical` compares two such folders byte for byte.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    out = Path(sys.argv[2]).resolve()
    sys.path[:0] = [str(root), str(root / "bench")]
    import domain

    assert Path(domain.__file__).is_relative_to(root), f"domain/ not loaded from {root}"
    simulate_scenarios(root, out / "simulate")
    cli_schema(root, out / "schema.json")
    core_decisions(out / "core")
    preemption_decisions(out / "preemption")
    synthetic_replay(out / "replay")


def _write(path: Path, rows: Iterable[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        for row in rows:
            handle.write(row if isinstance(row, bytes) else orjson.dumps(row, default=_plain))
            handle.write(b"\n")


def _plain(value: Any) -> Any:
    text = getattr(value, "text", None)  # a structured reason: its sentence
    if isinstance(text, str):
        return text
    if hasattr(value, "value"):
        return value.value
    raise TypeError(repr(value))


def quotaflow(root: Path, *args: str) -> bytes:
    """Runs ROOT's own `quotaflow` CLI (its pyproject's entry point): stdout, stderr, status."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    module, function = pyproject["project"]["scripts"]["quotaflow"].split(":")
    code = f"import sys; from {module} import {function} as m; sys.exit(m())"
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        check=False,
    )
    return done.stdout + b"-- stderr\n" + done.stderr + f"-- exit {done.returncode}\n".encode()


def simulate_scenarios(root: Path, out: Path) -> None:
    scenarios = sorted((root / "tests" / "scenarios").rglob("*.jsonl"))
    for scenario in scenarios:
        name = scenario.relative_to(root / "tests" / "scenarios").as_posix()
        path = out / (name.replace("/", "__") + ".out")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(quotaflow(root, "simulate", str(scenario)))


def cli_schema(root: Path, out: Path) -> None:
    out.write_bytes(quotaflow(root, "schema"))
    bad = out.parent / "refusals.jsonl"
    lines = [
        {"type": "QueueConfigured", "ts": 0, "queue": "a", "policy": {"kind": "lifo"}},
        {"type": "QueueConfigured", "ts": 0, "queue": "b", "policy": {"kind": 5}},
        {"type": "QueueConfigured", "ts": 0, "queue": "c", "policy": {"kind": "balance"}},
        {"type": "JobSubmitted", "ts": 1, "job": "j", "queue": "nope", "resources": {"gpu": 1}},
    ]
    bad.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    (out.parent / "refusals.out").write_bytes(quotaflow(root, "simulate", str(bad)))
    bad.unlink()


def _pending_rows(state: Any, now: int) -> Iterable[dict[str, Any]]:
    from domain.pending import pending_view

    for queue_id in sorted(state.queues):
        for entry in pending_view(state, queue_id, now):
            row = {"queue": queue_id}
            for name in entry.__slots__:
                value = getattr(entry, name)
                row[name] = getattr(value, "text", value)  # a structured reason: its sentence
            yield row


def core_decisions(out: Path) -> None:
    import core_bench

    for name, plugins, consolidation in (
        ("policies_only", core_bench.POLICIES_ONLY, False),
        ("all_plugins", core_bench.DEFAULT_PLUGINS, True),
    ):
        rng = random.Random(core_bench.SEED + 1)
        core, _ = core_bench.full_cluster(40, 600, rng, plugins, consolidation)
        rows: list[Any] = []
        for events in core_bench.finishes(core, 25, rng):
            rows += [command.model_dump(mode="json") for command in core.group(events)]
        _write(out / f"{name}.jsonl", rows)
        _write(out / f"{name}.pending.jsonl", _pending_rows(core.state, core.state.ts))


def preemption_decisions(out: Path) -> None:
    import preemption_bench

    from domain.simulation import Simulator

    for rule in ("reclaim", "self_level"):
        lines = [orjson.dumps(e) for e in preemption_bench.events(24, 180, 4, rule)]
        _write(out / f"{rule}.jsonl", Simulator().run(lines))


def synthetic_replay(out: Path) -> None:
    import replay_bench

    from domain.codec import encode_journal
    from domain.decider import close_group, fold, initial_state
    from projections import synthetic

    records = list(synthetic.journal(replay_bench._inputs(7), limit=6000))
    _write(out / "journal.jsonl", (encode_journal(record) for record in records))
    state = initial_state()
    commands: list[Any] = []
    for record in records:
        state, emitted = fold(state, record)
        commands += emitted
    state, emitted = close_group(state)
    commands += emitted
    _write(out / "commands.jsonl", (command.model_dump(mode="json") for command in commands))
    _write(out / "pending.jsonl", _pending_rows(state, state.ts))


if __name__ == "__main__":
    main()
