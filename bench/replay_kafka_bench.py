"""Kafka replay: records/s and peak memory of `quotaflow replay` at two journal lengths (bench).

For each length a fresh topic prefix gets bench/replay_bench.py's generated journal (keyed by
cluster, as the sequencer writes it) and the commands its fold emits (keyed by node, over
--command-partitions partitions). A fresh process then runs the replay audit
(streams.replay.replay, snapshots off: the bench writes none; garbage collection set as
`quotaflow replay` sets it) and reports its wall and CPU time and peak RSS. Flat peak RSS
across the lengths shows the replay holds the state, not the journal or the commands.

    .venv/bin/python bench/replay_kafka_bench.py                       # 50,000 and 200,000
    .venv/bin/python bench/replay_kafka_bench.py --lengths 50000 200000 --bootstrap HOST:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "bench"


async def _produce(bootstrap: str, prefix: str, records: int, partitions: int) -> int:
    from aiokafka import AIOKafkaProducer

    from bench.replay_bench import HEARTBEAT_MS, _inputs
    from domain.codec import encode_command, encode_journal
    from domain.decider import close_group, fold, initial_state
    from projections import synthetic
    from streams.kafka_io import Topics
    from streams.topic_admin import TopicSettings, ensure_topics

    topics = Topics.for_prefix(prefix)
    await ensure_topics(bootstrap, topics, TopicSettings(command_partitions=partitions))
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024, acks=1
    )
    await producer.start()
    key = CLUSTER.encode()
    state, sent, pending = initial_state(), 0, []
    try:
        for record in synthetic.journal(_inputs(42), heartbeat_ms=HEARTBEAT_MS, limit=records):
            pending.append(await producer.send(topics.journal, encode_journal(record), key=key))
            state, commands = fold(state, record)
            for command in commands:
                node = command.to_wire()["node"].encode()
                pending.append(
                    await producer.send(topics.commands, encode_command(command), key=node)
                )
            sent += len(commands)
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending = []
        state, commands = close_group(state)
        for command in commands:
            node = command.to_wire()["node"].encode()
            pending.append(await producer.send(topics.commands, encode_command(command), key=node))
        await asyncio.gather(*pending)
        return sent + len(commands)
    finally:
        await producer.stop()


def _replay(bootstrap: str, prefix: str) -> None:
    from cli.common import tune_gc_for_folding
    from streams.replay import replay

    tune_gc_for_folding()  # as `quotaflow replay` does
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start, cpu = time.perf_counter(), time.process_time()
    report = asyncio.run(replay(bootstrap, prefix, CLUSTER, snapshots=False))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert report.ok, report.summary()
    print(f"{report.journal_records} {report.observed} {wall:.3f} {cpu:.3f} {before} {peak}")


def _run(bootstrap: str, lengths: list[int], partitions: int) -> None:
    me = [sys.executable, str(Path(__file__).resolve())]
    print(
        f"{'records':>10} {'commands':>9} {'wall s':>7} {'CPU s':>7} {'rec/s wall':>11} "
        f"{'rec/s CPU':>10} {'RSS start MB':>13} {'peak RSS MB':>12}"
    )
    for length in lengths:
        prefix = f"bench-{uuid.uuid4().hex[:8]}."
        asyncio.run(_produce(bootstrap, prefix, length, partitions))
        out = subprocess.run(
            [*me, "--child", bootstrap, prefix], check=True, capture_output=True, text=True
        ).stdout.split()
        count, commands = int(out[0]), int(out[1])
        wall, cpu, before, peak = map(float, out[2:])
        print(
            f"{count:>10,} {commands:>9,} {wall:>7.2f} {cpu:>7.2f} {count / wall:>11,.0f} "
            f"{count / cpu:>10,.0f} {before / 1024:>13.0f} {peak / 1024:>12.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument("--bootstrap", help="a running broker (default: start one for the run)")
    parser.add_argument("--command-partitions", type=int, default=4)
    parser.add_argument("--child", nargs=2, metavar=("BOOTSTRAP", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _replay(*args.child)
        return 0
    if args.bootstrap:
        _run(args.bootstrap, args.lengths, args.command_partitions)
        return 0
    from devtools.broker import start_broker

    with tempfile.TemporaryDirectory() as tmp:
        handle = start_broker(ROOT, data_dir=Path(tmp) / "kafka")
        try:
            _run(handle.bootstrap, args.lengths, args.command_partitions)
        finally:
            handle.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
