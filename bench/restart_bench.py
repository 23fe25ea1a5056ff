"""Restart time: process start to first command of a real scheduler, with and without snapshots (bench).

For each journal length the bench writes a journal straight to a real broker (encoded
journal records, produced in bulk): a cluster of --nodes nodes x 8 GPUs, 20 queues and
--jobs jobs (1, 2 or 4 GPUs, some gangs; dispatched by folding this setup through the core,
as the scheduler would), all running unless --pending asks for jobs that never fit; the rest of
the journal is node heartbeats, each node every 10 s (heartbeat timeout 30 s), the bulk of
a live cluster's journal. Its time stamps end ahead of the wall clock, so the nodes are
alive whenever the scheduler runs.

Then, per length, two real `quotaflow scheduler` processes, each with one new 1-GPU job
waiting on quotaflow.jobs; the time is from process start to that job's Dispatch on
quotaflow.commands:

1. `--ignore-snapshots`: the state from the whole journal. This run writes a snapshot in
   the transaction of its first batch, as any scheduler does when it has none.
2. the default start: that snapshot plus the journal after it.

    .venv/bin/python bench/restart_bench.py                       # 20k, 100k, 1M records
    .venv/bin/python bench/restart_bench.py --sizes 20000 --bootstrap 127.0.0.1:9092

Without --bootstrap (or $QUOTAFLOW_BOOTSTRAP) it starts its own broker in a temporary
directory and stops it at the end. The smallest journal is 20k records: 5,000 node reports
and 10,000 submissions alone take 15k.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaProducer, TopicPartition

from domain.codec import encode_journal
from domain.decider import close_group, fold, initial_state
from domain.events import (
    ClusterConfigured,
    Event,
    JobSubmitted,
    JournalRecord,
    NodeHeartbeat,
    QueueConfigured,
)
from domain.snapshot import decode_state, encode_state
from domain.state import State
from streams.kafka_io import Topics, ensure_topics, read_committed_consumer, read_to_end
from streams.snapshots import Manifest, no_gc

ROOT = Path(__file__).resolve().parents[1]
QUEUES = 20
GPUS = 8
HEARTBEATS_PER_S = 500  # 5,000 nodes every 10 s
GROUP = 50  # records per journal group (one scheduler batch)
FIRST_COMMAND_TIMEOUT_S = 1800
PROBE_QUEUE = "bench-probe"  # holds only the probe jobs, so no blocked head delays them


def setup_events(nodes: int, jobs: int, pending: float, seed: int) -> Iterator[list[Event]]:
    """The cluster as groups of events: configuration, nodes, then jobs."""
    rng = random.Random(seed)
    yield (
        [ClusterConfigured(heartbeat_timeout_s=30)]
        + [
            QueueConfigured.model_validate(
                {
                    "queue": f"q{q:02d}",
                    "resources": {"gpu": {"quota": nodes * GPUS // QUEUES, "limit": -1}},
                    "policy": {"kind": ["fifo", "round_robin", "balance", "intelligent"][q % 4]},
                }
            )
            for q in range(QUEUES)
        ]
        + [
            QueueConfigured.model_validate(
                {"queue": PROBE_QUEUE, "resources": {"gpu": {"quota": 8}}}
            )
        ]
    )
    beats = [heartbeat(n) for n in range(nodes)]
    for start in range(0, nodes, 500):
        yield list(beats[start : start + 500])
    batch: list[Event] = []
    for j in range(jobs):
        gpu = rng.choice([1, 1, 1, 2, 2, 4])
        spec: dict[str, object] = {
            "job": f"job-{j:06d}",
            "queue": f"q{rng.randrange(QUEUES):02d}",
            "priority": rng.randint(1, 9),
            "tasks": 2 if rng.random() < 0.1 else 1,
            "resources": {"gpu": gpu, "cpu": 4000 * gpu, "memory": 32000 * gpu},
        }
        if rng.random() < pending:
            # No node has this label: pending for good, in a round_robin queue (which skips
            # a blocked job, so it holds up nothing behind it).
            spec["node_selector"] = {"pool": "reserved"}
            spec["queue"] = f"q{rng.randrange(1, QUEUES, 4):02d}"
        batch.append(JobSubmitted.model_validate(spec))
        if len(batch) == 500:
            yield batch
            batch = []
    if batch:
        yield batch


def heartbeat(n: int) -> NodeHeartbeat:
    return NodeHeartbeat.model_validate(
        {
            "node": f"node-{n:05d}",
            "capacity": {"gpu": GPUS, "cpu": 128000, "memory": 1024000},
            "labels": {"zone": f"z{n % 4}"},
        }
    )


def journal(total: int, args: argparse.Namespace, end_ts: int) -> Iterator[bytes]:
    """Encoded journal records: the setup, folded to be real, then heartbeats up to `total`."""
    nodes = args.nodes
    groups = list(setup_events(nodes, args.jobs, args.pending, seed=7))
    filler_groups = max(0, total - sum(len(g) for g in groups) + GROUP - 1) // GROUP
    ts = end_ts - (filler_groups + 1) * 1000 * GROUP // HEARTBEATS_PER_S - len(groups)
    state: State = initial_state()
    seq = 0
    dispatched = 0
    for group in groups:
        ts += 1
        for event in group:
            seq += 1
            record = JournalRecord(seq=seq, ts=ts, event=event)
            state, _ = fold(state, record)
            yield encode_journal(record)
        state, commands = close_group(state)
        dispatched += sum(1 for c in commands if c.type == "Dispatch")
    print(
        f"  setup: {seq} records, {len(state.nodes)} nodes, {len(state.jobs)} jobs "
        f"({dispatched} dispatches)",
        flush=True,
    )
    beats = [heartbeat(n) for n in range(nodes)]
    step = 1000 * GROUP // HEARTBEATS_PER_S
    node = 0
    ts += 1000
    while seq < total:
        for _ in range(min(GROUP, total - seq)):
            seq += 1
            yield encode_journal(JournalRecord(seq=seq, ts=ts, event=beats[node]))
            node = (node + 1) % nodes
        ts += step


async def produce_journal(
    bootstrap: str, topics: Topics, cluster: str, total: int, args: argparse.Namespace
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024, acks=1
    )
    await producer.start()
    try:
        end_ts = time.time_ns() // 1_000_000 + 6 * 3600 * 1000  # ahead: nodes stay alive
        futures = []
        key = cluster.encode()
        for raw in journal(total, args, end_ts):
            futures.append(await producer.send(topics.journal, raw, key=key))
            if len(futures) >= 20_000:
                await asyncio.gather(*futures)
                futures = []
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def first_command(
    bootstrap: str, topics: Topics, cluster: str, job: str, extra: list[str], log: Path
) -> float:
    """Seconds from starting a scheduler process to the Dispatch of `job`."""
    consumer = read_committed_consumer(bootstrap)
    await consumer.start()
    tp = TopicPartition(topics.commands, 0)
    consumer.assign([tp])
    await consumer.seek_to_end(tp)
    await consumer.position(tp)
    submitted = {"type": "JobSubmitted", "job": job, "queue": PROBE_QUEUE, "resources": {"gpu": 1}}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    await producer.send_and_wait(topics.jobs, orjson.dumps(submitted), key=job.encode())
    await producer.stop()
    args = [sys.executable, "-m", "cli", "scheduler", "--bootstrap", bootstrap]
    args += ["--topic-prefix", topics.prefix, "--cluster", cluster, *extra]
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        while time.monotonic() - started < FIRST_COMMAND_TIMEOUT_S:
            batch = await consumer.getmany(tp, timeout_ms=20)
            for record in batch.get(tp, []):
                command = orjson.loads(record.value)
                if command.get("job") == job and command.get("type") == "Dispatch":
                    return time.monotonic() - started
            if proc.poll() is not None:
                raise RuntimeError(f"scheduler exited; see {log}")
        raise TimeoutError(f"no Dispatch for {job}; see {log}")
    finally:
        proc.terminate()
        proc.wait(120)
        await consumer.stop()


async def snapshot_sizes(bootstrap: str, topics: Topics) -> tuple[int, int]:
    """Canonical and on-the-wire size of the newest snapshot."""
    read = await read_to_end(bootstrap, topics.snapshots)
    manifests = [r for r in read[topics.snapshots] if r.key and r.key.endswith(b"/manifest")]
    manifest = Manifest.from_bytes(manifests[-1].value)
    chunks = {r.offset: len(r.value or b"") for r in read[topics.snapshots]}
    return manifest.size, sum(chunks[o] for o in manifest.chunk_offsets)


def codec_times(args: argparse.Namespace) -> tuple[int, float, float]:
    """Size, encode and decode seconds of the setup state, in this process."""
    state: State = initial_state()
    seq = 0
    events = setup_events(args.nodes, args.jobs, args.pending, seed=7)
    for ts, group in enumerate(events, start=1):
        for event in group:
            seq += 1
            state, _ = fold(state, JournalRecord(seq=seq, ts=ts, event=event))
        state, _ = close_group(state)
    with no_gc():  # as the scheduler encodes and decodes
        started = time.perf_counter()
        body = encode_state(state)
        encoded = time.perf_counter() - started
        started = time.perf_counter()
        decode_state(body)
        decoded = time.perf_counter() - started
    return len(body), encoded, decoded


async def bench(bootstrap: str, args: argparse.Namespace, logs: Path) -> None:
    size, enc, dec = codec_times(args)
    print(
        f"state of {args.nodes} nodes, {args.jobs} jobs: {size / 1e6:.1f} MB canonical, "
        f"encode {enc * 1000:.0f} ms, decode {dec * 1000:.0f} ms (in process)\n",
        flush=True,
    )
    rows = []
    for total in args.sizes:
        topics = Topics.for_prefix(f"bench-{uuid.uuid4().hex[:8]}.")
        cluster = "bench"
        await ensure_topics(bootstrap, topics)
        print(f"{total:,} records:", flush=True)
        started = time.monotonic()
        await produce_journal(bootstrap, topics, cluster, total, args)
        print(f"  journal produced in {time.monotonic() - started:.1f} s", flush=True)
        cold = await first_command(
            bootstrap,
            topics,
            cluster,
            "probe-cold",
            ["--ignore-snapshots"],
            logs / f"{total}-cold.log",
        )
        print(f"  without snapshots: {cold:.2f} s", flush=True)
        canonical, wire = await snapshot_sizes(bootstrap, topics)
        warm = await first_command(
            bootstrap, topics, cluster, "probe-warm", [], logs / f"{total}-warm.log"
        )
        print(f"  from the snapshot: {warm:.2f} s", flush=True)
        rows.append((total, canonical, wire, cold, warm))
    print(
        "\n| journal records | snapshot (canonical / on Kafka) | first command without snapshots | with snapshots |"
    )
    print("|---|---|---|---|")
    for total, canonical, wire, cold, warm in rows:
        print(
            f"| {total:,} | {canonical / 1e6:.1f} MB / {wire / 1e6:.1f} MB | {cold:.2f} s | {warm:.2f} s |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("QUOTAFLOW_BOOTSTRAP"))
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[20_000, 100_000, 1_000_000],
    )
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--jobs", type=int, default=10_200)
    parser.add_argument(
        "--pending",
        type=float,
        default=0.0,
        help="fraction of jobs that never fit (node selector nothing matches); default 0",
    )
    parser.add_argument("--logs", type=Path, help="keep the schedulers' logs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as tmp:
        logs = Path(tmp)
        if args.logs:
            logs = args.logs
            logs.mkdir(parents=True, exist_ok=True)
        if args.bootstrap:
            asyncio.run(bench(args.bootstrap, args, logs))
            return 0
        from devtools.broker import start_broker

        handle = start_broker(ROOT, data_dir=Path(tmp) / "kafka")
        try:
            asyncio.run(bench(handle.bootstrap, args, logs))
        finally:
            handle.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
