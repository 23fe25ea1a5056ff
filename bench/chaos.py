"""Chaos rounds on a local three-broker cluster: kill brokers and schedulers while jobs stream in, then count what was lost, duplicated and reproduced (benchmark, I/O).

    .venv/bin/python bench/chaos.py --rounds 20

Starts its own three-node KRaft cluster (``devtools.cluster``) in a temporary directory, two
``quotaflow scheduler`` processes (one active, one warm standby) and fake node agents, and
streams jobs the whole time. Each round does one of, in turn:

- ``leader``: SIGKILL the broker leading the journal partition, restart it ``--down-seconds``
  later;
- ``follower``: SIGKILL a broker that follows the journal partition, restart it later;
- ``stop``: stop a broker cleanly (SIGTERM): the first time for ``--stop-seconds`` (a
  minute by default), later for ``--down-seconds``;
- ``scheduler``: SIGKILL the active scheduler; the standby takes over; the killed one comes
  back as the new standby.

Per round it prints the failover time: for a broker, from the kill until a job submitted
after it is journaled; for the scheduler, from the kill until the standby has started
sequencing. At the end it waits for every job to finish and prints lost / duplicated /
reproduced counts (the checks of tests/cluster). Timings depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.cluster import ClusterHandle, start_cluster
from devtools.kafka_home import project_root
from streams.kafka_io import Topics, TopicSettings, ensure_topics, idempotent_producer
from streams.replay import read_journal
from tests.support.flow import (
    QUEUE,
    ROOT,
    SchedulerProcess,
    all_finished,
    job,
    node_agents,
    partition_leader,
    quotaflow_command,
    send,
    wait_for,
)
from tests.support.outcome import outcome

ACTIONS = ("leader", "follower", "stop", "scheduler")
CLUSTER = "chaos"


class Streamer:
    """Submits one job every ``interval`` seconds until stopped; counts what it sent."""

    def __init__(self, bootstrap: str, topics: Topics, interval: float) -> None:
        self.bootstrap, self.topics, self.interval = bootstrap, topics, interval
        self.sent = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        producer = idempotent_producer(self.bootstrap)
        await producer.start()
        try:
            while not self.stop.is_set():
                submitted = job(self.sent)
                await send(producer, self.topics.jobs, submitted, submitted["job"])
                self.sent += 1
                await asyncio.sleep(self.interval)
        finally:
            await producer.stop()


async def journaled(bootstrap: str, topics: Topics, name: str) -> bool:
    journal = await read_journal(bootstrap, topics.prefix, CLUSTER)
    return any(getattr(r.event, "job", None) == name for r in journal)


def start_projections(
    bootstrap: str, topics: Topics, logs: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """The real projections process (no checkpoint: it folds the journal from the start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with (logs / "projections.log").open("wb") as log:
        process = subprocess.Popen(
            [*quotaflow_command(), "projections", "--bootstrap", bootstrap, "--topic-prefix",
             topics.prefix, "--port", str(port), "--no-checkpoint"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process, port


async def projections_caught_up(port: int, seq: int) -> dict[str, object] | None:
    def get() -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return dict(json.loads(response.read()))

    health = await asyncio.to_thread(get)
    return health if health.get("seq") == seq else None


async def broker_round(
    cluster: ClusterHandle, topics: Topics, streamer: Streamer, action: str, down_s: float
) -> tuple[int, float]:
    bootstrap = cluster.bootstrap
    leader = await partition_leader(bootstrap, topics.journal)
    if action == "leader":
        victim = leader
    else:
        victim = next(n.node_id for n in cluster.nodes if n.node_id != leader)
    killed_at = time.monotonic()
    if action == "stop":
        await asyncio.to_thread(cluster.stop_node, victim)
    else:
        cluster.kill(victim)
    after = job(streamer.sent + 1)["job"]
    await wait_for(lambda: journaled(bootstrap, topics, after), f"{after} journaled", 300)
    failover = time.monotonic() - killed_at
    await asyncio.sleep(max(0.0, down_s - (time.monotonic() - killed_at)))
    await asyncio.to_thread(cluster.restart, victim)
    return victim, failover


async def scheduler_round(schedulers: list[SchedulerProcess]) -> tuple[str, float]:
    active: SchedulerProcess = await wait_for(
        lambda: asyncio.sleep(0, next((s for s in schedulers if s.active()), None)),
        "an active scheduler",
        300,
    )
    standby = next(s for s in schedulers if s is not active)
    active.kill()
    killed_at = time.monotonic()
    await wait_for(lambda: asyncio.sleep(0, standby.active()), "the takeover", 300)
    failover = time.monotonic() - killed_at
    active.start()  # back as the standby
    await wait_for(lambda: asyncio.sleep(0, "waits as a standby" in active.log()), "standby", 120)
    return standby.name, failover


async def chaos(args: argparse.Namespace, cluster: ClusterHandle, logs: Path) -> int:
    bootstrap = cluster.bootstrap
    topics = Topics.for_prefix("chaos.")
    await ensure_topics(bootstrap, topics, TopicSettings(3, 2))
    schedulers = [
        SchedulerProcess(bootstrap, topics, CLUSTER, name, logs) for name in ("sched-a", "sched-b")
    ]
    schedulers[0].start()
    await wait_for(lambda: asyncio.sleep(0, schedulers[0].active()), "the first scheduler")
    schedulers[1].start()
    projections, port = start_projections(bootstrap, topics, logs)
    producer = idempotent_producer(bootstrap)
    await producer.start()
    await send(producer, topics.admin, QUEUE, "team")
    await producer.stop()
    times: dict[str, list[float]] = {action: [] for action in ACTIONS}
    exits: list[str] = []  # scheduler processes found dead without being killed
    print(f"{'round':>5}  {'action':<9}  {'target':<8}  {'failover s':>10}  jobs sent")
    try:
        async with node_agents(bootstrap, topics):
            streamer = Streamer(bootstrap, topics, args.interval)
            streaming = asyncio.create_task(streamer.run())
            stopped_long = False
            for round_no in range(1, args.rounds + 1):
                action = ACTIONS[(round_no - 1) % len(ACTIONS)]
                await asyncio.sleep(args.settle_seconds)
                for scheduler in schedulers:
                    if not scheduler.alive():  # should never happen: counted, then restarted
                        exits.append(f"{scheduler.name} before round {round_no}")
                        scheduler.start()
                if action == "scheduler":
                    target, failover = await scheduler_round(schedulers)
                else:
                    # One broker is stopped for --stop-seconds once; later stops are shorter.
                    long_stop = action == "stop" and not stopped_long
                    stopped_long = stopped_long or long_stop
                    down = args.stop_seconds if long_stop else args.down_seconds
                    node, failover = await broker_round(cluster, topics, streamer, action, down)
                    target = f"node {node}"
                times[action].append(failover)
                print(
                    f"{round_no:>5}  {action:<9}  {target:<8}  {failover:>10.1f}  {streamer.sent}",
                    flush=True,
                )
            streamer.stop.set()
            await streaming
            await wait_for(
                lambda: all_finished(bootstrap, topics, CLUSTER, streamer.sent),
                "every job to finish",
                600,
            )
        for scheduler in schedulers:
            scheduler.terminate()  # the journal ends here, so the projections can catch up
        last_seq = (await read_journal(bootstrap, topics.prefix, CLUSTER))[-1].seq
        health = await wait_for(lambda: projections_caught_up(port, last_seq), "projections", 300)
    finally:
        for scheduler in schedulers:
            scheduler.terminate()
        projections.terminate()
        projections.wait(60)
    result = await outcome(bootstrap, topics, CLUSTER, streamer.sent)
    errors = health["errors"]
    unexplained = health["observed_not_derived"]  # commands seen that the view cannot derive
    projections_ok = not errors and not unexplained
    print()
    print(f"{'action':<9}  {'rounds':>6}  {'failover median s':>17}  {'max s':>6}")
    for action, values in times.items():
        if values:
            print(
                f"{action:<9}  {len(values):>6}  {statistics.median(values):>17.1f}  "
                f"{max(values):>6.1f}"
            )
    print()
    print(
        f"jobs {result.jobs}: lost {result.lost}, duplicated {result.duplicated}, journal gaps "
        f"{result.gaps}; commands {result.commands}, reproduced {result.reproduced}"
    )
    print(result.summary)
    print(
        f"projections (running throughout): at seq {health['seq']} of {last_seq}, "
        f"commands derived {health['commands_derived']} observed {health['commands_observed']}, "
        f"observed but not derived {unexplained}, errors {errors}"
    )
    print(f"scheduler processes that exited on their own: {len(exits)} {exits or ''}")
    return 0 if result.ok and projections_ok and not exits else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--down-seconds", type=float, default=10, help="killed broker downtime")
    parser.add_argument("--stop-seconds", type=float, default=60, help="stopped broker downtime")
    parser.add_argument("--settle-seconds", type=float, default=3, help="pause between rounds")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between jobs")
    args = parser.parse_args()
    # The Kafka client logs every refused connection to a dead broker; the table says enough.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="quotaflow-chaos-") as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        cluster = start_cluster(project_root(), Path(tmp) / "cluster", brokers=3)
        print(f"cluster {cluster.bootstrap}; logs in {logs} (removed at the end)", flush=True)
        try:
            return asyncio.run(chaos(args, cluster, logs))
        finally:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
