"""Streaming replay: records/s and peak memory of folding a journal file at two lengths (bench).

Each length runs in fresh processes: one writes a generated journal (bench/replay_bench.py's
workload) to a temporary file, record by record; another streams it back through decode +
fold, as `quotaflow replay --file` does, and reports its own peak RSS. Flat memory across the
two lengths shows replay holds the state, not the journal.

    .venv/bin/python bench/replay_stream_bench.py                  # 100,000 and 400,000 records
    .venv/bin/python bench/replay_stream_bench.py --lengths 50000 200000
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _write(path: str, records: int) -> None:
    from bench.replay_bench import HEARTBEAT_MS, _inputs
    from domain.codec import encode_journal
    from projections import synthetic

    with open(path, "wb") as out:
        for record in synthetic.journal(_inputs(42), heartbeat_ms=HEARTBEAT_MS, limit=records):
            out.write(encode_journal(record) + b"\n")


def _replay(path: str) -> None:
    from cli.view_sources import iter_file
    from domain.decider import close_group, fold, initial_state

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start, cpu = time.perf_counter(), time.process_time()
    state = initial_state()
    count = 0
    for record in iter_file(path):
        state, _ = fold(state, record)
        count += 1
    close_group(state)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{count} {wall:.3f} {cpu:.3f} {before} {peak}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--child", nargs=2, metavar=("ACTION", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        action, path = args.child
        _write(path, args.records) if action == "write" else _replay(path)
        return 0
    me = [sys.executable, str(Path(__file__).resolve())]
    print(
        f"{'records':>10} {'file MB':>8} {'wall s':>8} {'CPU s':>8} {'records/s (CPU)':>16} "
        f"{'RSS at start MB':>16} {'peak RSS MB':>12}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for length in args.lengths:
            path = str(Path(tmp) / f"journal-{length}.jsonl")
            subprocess.run([*me, "--child", "write", path, "--records", str(length)], check=True)
            out = subprocess.run(
                [*me, "--child", "replay", path], check=True, capture_output=True, text=True
            ).stdout.split()
            count, wall, cpu, before, peak = int(out[0]), *map(float, out[1:])
            size = Path(path).stat().st_size / 1e6
            print(
                f"{count:>10,} {size:>8.1f} {wall:>8.2f} {cpu:>8.2f} {count / cpu:>16,.0f} "
                f"{before / 1024:>16.0f} {peak / 1024:>12.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
