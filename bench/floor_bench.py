"""Floors under the per-record goals: replay's parts timed apart, and Kafka with no fold (bench).

Issue 12 asks replay for 50,000 records/s (20 µs a record) and the scheduler over Kafka for
80 µs of CPU an input. This prints what the parts of each cost on their own, so a reader can
see whether any work on the cycle alone could reach them.

1. Replay, in this process: a journal (`--journal FILE`, or `replay_bench.py`'s workload at
   `--records`) is decoded (`decode_journal`, as `quotaflow replay --file` does), then folded
   with each record's apply and each group's cycle timed apart (the same calls `fold` makes).
   Printed: µs a record for each part, records/s in all, and records/s if cycles cost nothing.
2. The Kafka shell, with `--bootstrap HOST:PORT`: the journal's lines are produced to
   `quotaflow.jobs` under a fresh topic prefix, then consumed and written back as the
   scheduler writes (one journal record an input and one command for every three,
   `--per-transaction` inputs a transaction, gathered over fetches, with the consumer's
   offsets in it; the project's own consumer and transactional producer settings) with no
   decoding, no fold and no encoding. Printed: the inputs a transaction carried and this
   process's CPU an input. 76 is about the inputs a transaction `kafka_bench.py` printed at
   500 jobs/s.

    .venv/bin/python bench/floor_bench.py                              # replay only
    .venv/bin/python bench/floor_bench.py --bootstrap 127.0.0.1:9092   # and the Kafka shell
    .venv/bin/python bench/floor_bench.py --journal FILE               # a journal of your own
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPLAY_GOAL = 50_000  # records/s (issue 12)
KAFKA_GOAL_US = 80  # µs of CPU an input (issue 12)


def replay_parts(lines: list[bytes]) -> tuple[float, float, float]:
    """Seconds of CPU spent decoding, applying and in cycles, over the whole journal."""
    from cli.common import tune_gc_for_folding
    from domain.codec import decode_journal
    from domain.decider import apply, close_group, initial_state

    tune_gc_for_folding()
    clock = time.process_time
    began = clock()
    records = [decode_journal(line) for line in lines]
    decoding = clock() - began
    state = initial_state()
    applying = cycles = 0.0
    for record in records:
        if state.group_open and record.ts != state.ts:  # as `fold` closes a group
            began = clock()
            state, _ = close_group(state)
            cycles += clock() - began
        began = clock()
        apply(state, record.event, record.seq, record.ts)
        applying += clock() - began
    began = clock()
    close_group(state)
    cycles += clock() - began
    return decoding, applying, cycles


def print_replay(lines: list[bytes], source: str) -> float:
    """Prints replay's parts; returns the fold's µs a record (decode, apply and cycles)."""
    decoding, applying, cycles = replay_parts(lines)
    count = len(lines)
    per = [part / count * 1e6 for part in (decoding, applying, cycles)]
    print(f"\nreplay of {source}: {count:,} records, CPU (goal {REPLAY_GOAL:,} records/s)")
    print(
        f"{'decode us':>10} {'apply us':>9} {'cycles us':>10} {'records/s':>10} "
        f"{'without cycles':>15} {'apply alone':>12}"
    )
    print(
        f"{per[0]:>10.1f} {per[1]:>9.1f} {per[2]:>10.1f} {1e6 / sum(per):>10,.0f} "
        f"{1e6 / (per[0] + per[1]):>15,.0f} {1e6 / per[1]:>12,.0f}"
    )
    return sum(per)


async def kafka_shell(
    bootstrap: str, lines: list[bytes], per_transaction: int
) -> tuple[float, float]:
    """µs of CPU an input for consuming the lines and writing them back in transactions,
    and the inputs a transaction carried."""
    from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition

    from streams.kafka_io import (
        SCHEDULER_FETCH_MIN_BYTES,
        SCHEDULER_FETCH_WAIT_MS,
        read_committed_consumer,
        transactional_producer,
    )
    from streams.topic_admin import ensure_topics
    from streams.topics import Topics

    topics = Topics.for_prefix(f"floor-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(bootstrap, topics)
    loader = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await loader.start()
    try:
        for number, line in enumerate(lines):
            await loader.send(topics.jobs, line, key=b"%d" % number)
        await loader.flush()
    finally:
        await loader.stop()
    group = f"{topics.prefix}scheduler"
    consumer = read_committed_consumer(
        bootstrap,
        group,
        fetch_max_wait_ms=SCHEDULER_FETCH_WAIT_MS,
        fetch_min_bytes=SCHEDULER_FETCH_MIN_BYTES,
    )
    consumer.subscribe([topics.jobs])
    producer = transactional_producer(bootstrap, group)
    await consumer.start()
    await producer.start()
    try:
        # A first transaction outside the count: the producer's id, the coordinators and the
        # new topics' leaders (a broker may answer NOT_ENOUGH_REPLICAS just after creating one).
        async with producer.transaction():
            await producer.send(topics.journal, b"{}", key=b"cluster")
            await producer.send(topics.commands, b"{}", key=b"n")
        done, transactions, began = 0, 0, time.process_time()
        while done < len(lines):
            # A batch of per_transaction inputs (fewer at the end), gathered over fetches as
            # the scheduler's batch window gathers them.
            batch: list[ConsumerRecord[bytes, bytes]] = []
            offsets: dict[TopicPartition, int] = {}
            while len(batch) < min(per_transaction, len(lines) - done):
                fetched = await consumer.getmany(
                    timeout_ms=1000, max_records=per_transaction - len(batch)
                )
                for partition, records in fetched.items():
                    batch += records
                    offsets[partition] = records[-1].offset + 1
            async with producer.transaction():
                for record in batch:
                    await producer.send(topics.journal, record.value, key=b"cluster")
                    done += 1
                    if done % 3 == 0:
                        await producer.send(topics.commands, record.value[:200], key=b"n")
                await producer.send_offsets_to_transaction(offsets, group)
            transactions += 1
        cpu = time.process_time() - began
        return cpu / done * 1e6, done / transactions
    finally:
        await producer.stop()
        await consumer.stop()


def generated(records: int) -> list[bytes]:
    from bench.replay_stream_bench import _write

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal.jsonl"
        _write(str(path), records)
        return path.read_bytes().splitlines()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="generated journal length")
    parser.add_argument("--journal", help="a journal file (JSON lines) instead of generating")
    parser.add_argument("--bootstrap", help="a broker: also measure the Kafka shell")
    parser.add_argument("--per-transaction", type=int, nargs="+", default=[76, 500, 2000])
    args = parser.parse_args(argv)
    if args.journal:
        lines = Path(args.journal).read_bytes().splitlines()
        source = args.journal
    else:
        lines = generated(args.records)
        source = f"replay_bench.py's workload ({args.records:,} records generated)"
    fold_us = print_replay(lines, source)
    if not args.bootstrap:
        print("\nno --bootstrap: the Kafka shell was not measured")
        return 0
    print(f"\nKafka shell, no fold: {len(lines):,} inputs (goal {KAFKA_GOAL_US} us an input)")
    print(f"{'inputs/txn':>10} {'CPU us/input':>13} {'with this fold':>15}")
    for per_transaction in args.per_transaction:
        shell, carried = asyncio.run(kafka_shell(args.bootstrap, lines, per_transaction))
        print(f"{carried:>10.1f} {shell:>13.1f} {shell + fold_us:>15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
