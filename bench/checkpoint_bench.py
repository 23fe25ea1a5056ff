"""Projections restart: rebuilding the view from the whole journal vs loading its checkpoint (bench).

The journal is replay_bench's (seeded, obedient agents). The view is folded once; then the
bench times what a restarted projections process does in each case: a rebuild folds every
record, a resume loads the checkpoint (digest check and unpickling) and folds only the tail.
It also prints the checkpoint's size and the time to take one (the projector does that
every --checkpoint-records records).

    .venv/bin/python bench/checkpoint_bench.py                  # 100,000 records
    .venv/bin/python bench/checkpoint_bench.py --records 300000 --tail 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_bench import generate
from projections.checkpoint import dump, load
from projections.view import View

CODE = "bench"
TOPICS = ("quotaflow.journal", "quotaflow.commands")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="journal size")
    parser.add_argument("--tail", type=int, default=1_000, help="records after the checkpoint")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    journal = generate(args.records, args.seed)
    cut = max(0, len(journal) - args.tail)
    head, tail = journal[:cut], journal[cut:]

    start = time.perf_counter()
    rebuilt = View()
    for record in journal:
        rebuilt.apply(record)
    rebuild_s = time.perf_counter() - start

    saved = View()
    for record in head:
        saved.apply(record)
    start = time.perf_counter()
    data = dump(saved, code=CODE, topics=TOPICS)
    dump_s = time.perf_counter() - start

    start = time.perf_counter()
    resumed = load(data, code=CODE, topics=TOPICS).view
    load_s = time.perf_counter() - start
    for record in tail:
        resumed.apply(record)
    resume_s = time.perf_counter() - start
    assert resumed.state.seq == rebuilt.state.seq

    state = saved.state
    print(
        f"journal {len(journal):,} records; at the checkpoint: {len(state.jobs):,} live jobs, "
        f"{len(state.ended_jobs):,} ended, {len(saved.timelines):,} timelines"
    )
    print("| what | time |")
    print("|---|---:|")
    print(f"| rebuild: fold all {len(journal):,} records | {rebuild_s:.2f} s |")
    print(f"| take a checkpoint ({len(data) / 1e6:.1f} MB) | {dump_s:.2f} s |")
    print(f"| resume: load the checkpoint | {load_s:.2f} s |")
    print(f"| resume: load + fold the {len(tail):,}-record tail | {resume_s:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
