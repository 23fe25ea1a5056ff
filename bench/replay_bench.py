"""Replay speed: records per second of a generated journal folded through the pure core (bench).

The journal is generated deterministically (seeded): queues, nodes and a stream of jobs,
journaled as the sequencer would with obedient agents (projections.synthetic), until it
holds --records records. The replay is then timed three ways: the bare fold
(domain.decider, as `quotaflow replay` does), the fold from encoded bytes (decode included),
and the projections' view (fold plus timelines and usage).

    .venv/bin/python bench/replay_bench.py               # 1,000,000 records
    .venv/bin/python bench/replay_bench.py --records 100000
    .venv/bin/python bench/replay_bench.py --records 100000 --default-gc  # CPython's GC
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli.common import tune_gc_for_folding
from domain.codec import decode_journal, decode_timed, encode_journal
from domain.decider import close_group, fold, initial_state
from domain.events import Event, JournalRecord
from projections import synthetic
from projections.view import View

QUEUES = 8
NODES = 64
GPUS_PER_NODE = 8
HEARTBEAT_MS = 300_000  # agents' heartbeat period; the timeout below is 600 s


def _timed_event(body: dict[str, Any]) -> tuple[int, Event]:
    return decode_timed(orjson.dumps(body))


def _inputs(seed: int) -> Iterator[tuple[int, Event]]:
    rng = random.Random(seed)
    policies = ["fifo", "round_robin", "balance", "intelligent"]
    # Agents heartbeat; a long timeout keeps the journal about jobs rather than heartbeats.
    yield _timed_event({"type": "ClusterConfigured", "heartbeat_timeout_s": 600, "ts": 0})
    share = NODES * GPUS_PER_NODE // QUEUES
    for q in range(QUEUES):
        yield _timed_event(
            {
                "type": "QueueConfigured",
                "queue": f"q{q}",
                "ts": 0,
                "resources": {"gpu": {"quota": share, "limit": -1}},
                "policy": {"kind": policies[q % len(policies)]},
            }
        )
    for n in range(NODES):
        capacity = {"gpu": GPUS_PER_NODE, "cpu": 96000, "memory": 768000}
        yield _timed_event(
            {"type": "NodeHeartbeat", "node": f"n{n:03d}", "capacity": capacity, "ts": 0}
        )
    ts = 1000
    job = 0
    while True:
        # One job every 15 s on average, each about 3 GPUs for 30 min: ~70% of 512 GPUs, so
        # queues stay short but real (an overloaded cluster grows queues without bound).
        ts += rng.randint(0, 30_000)
        job += 1
        yield _timed_event(
            {
                "type": "JobSubmitted",
                "job": f"j{job:08d}",
                "queue": f"q{rng.randrange(QUEUES)}",
                "priority": rng.randint(1, 9),
                "tasks": rng.choice([1, 1, 1, 2, 4]),
                "resources": {"gpu": rng.choice([0.5, 1, 1, 2, 4]), "cpu": 4000, "memory": 32000},
                "duration_s": rng.randint(30, 3600),
                "ts": ts,
            }
        )


def generate(records: int, seed: int = 42) -> list[JournalRecord]:
    """A valid sequencer journal: each ts group closed once, agents answering 1 ms later."""
    return list(synthetic.journal(_inputs(seed), heartbeat_ms=HEARTBEAT_MS, limit=records))


def _timed(label: str, count: int, work: Any) -> float:
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    print(
        f"{label:<38} {count:>10,} records in {elapsed:8.2f} s = {count / elapsed:>10,.0f} records/s"
    )
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="journal size (default 1,000,000)"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--skip-view", action="store_true", help="time only the bare fold")
    parser.add_argument(
        "--default-gc", action="store_true", help="keep CPython's collection thresholds"
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    journal = generate(args.records, args.seed)
    kinds: dict[str, int] = {}
    for record in journal:
        kinds[record.event.type] = kinds.get(record.event.type, 0) + 1
    print(
        f"generated {len(journal):,} records (seed {args.seed}; {QUEUES} queues, {NODES} nodes x "
        f"{GPUS_PER_NODE} GPUs) in {time.perf_counter() - start:.1f} s: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))
    )
    encoded = [encode_journal(r) for r in journal]
    if not args.default_gc:
        tune_gc_for_folding()  # as `quotaflow replay` does
    print(f"garbage collection: {'CPython defaults' if args.default_gc else 'as quotaflow replay'}")
    commands: list[int] = [0]

    def bare() -> None:
        state = initial_state()
        emitted = 0
        for record in journal:
            state, out = fold(state, record)
            emitted += len(out)
        state, out = close_group(state)
        commands[0] = emitted + len(out)

    def decoded() -> None:
        state = initial_state()
        for raw in encoded:
            state, _ = fold(state, decode_journal(raw))
        close_group(state)

    def view() -> None:
        projection = View()
        for record in journal:
            projection.apply(record)
        projection.finish()

    _timed("replay: fold (pure core)", len(journal), bare)
    print(f"{'':<38} {commands[0]:>10,} commands emitted")
    _timed("replay: decode + fold", len(journal), decoded)
    if not args.skip_view:
        _timed("projection view: fold + timelines + usage", len(journal), view)
    return 0


if __name__ == "__main__":
    sys.exit(main())
