"""QuotaFlow on a real three-broker cluster: the flow, a killed journal leader, a standby takeover (real Kafka, real processes)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from devtools.cluster import ClusterHandle
from streams.kafka_io import (
    Topics,
    TopicSettings,
    ensure_topics,
    idempotent_producer,
    topic_configs,
)
from streams.leadership import active_scheduler
from tests.support.flow import (
    QUEUE,
    ROOT,
    SchedulerProcess,
    all_finished,
    node_agents,
    partition_leader,
    quotaflow_command,
    send,
    stream_jobs,
    wait_for,
)
from tests.support.outcome import outcome

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

JOBS = 120


async def _topics(bootstrap: str) -> Topics:
    topics = Topics.for_prefix(f"t{uuid.uuid4().hex[:8]}.")
    await ensure_topics(
        bootstrap, topics, TopicSettings(replication_factor=3, min_insync_replicas=2)
    )
    return topics


async def _configure(bootstrap: str, topics: Topics) -> None:
    producer = idempotent_producer(bootstrap)
    await producer.start()
    try:
        await send(producer, topics.admin, QUEUE, "team")
    finally:
        await producer.stop()


def test_cli_flow_on_three_brokers(all_nodes_up: ClusterHandle, tmp_path: Path) -> None:
    """Topics replicated three times; the scheduler, an agent, submit and replay work unchanged."""
    bootstrap = all_nodes_up.bootstrap
    prefix = f"t{uuid.uuid4().hex[:8]}."
    options = ["--bootstrap", bootstrap, "--topic-prefix", prefix]

    def run(*args: str) -> str:
        result = subprocess.run(
            [*quotaflow_command(), *args, *options],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, f"quotaflow {' '.join(args)}: {result.stderr}"
        return result.stdout

    run("kafka", "topics", "--replication-factor", "3", "--min-insync-replicas", "2")
    topics = Topics.for_prefix(prefix)
    configs = asyncio.run(topic_configs(bootstrap, [topics.journal], wait_s=30))
    assert configs[topics.journal]["min.insync.replicas"] == "2"
    logs = {name: (tmp_path / f"{name}.log").open("wb") for name in ("scheduler", "agent")}
    processes = [
        subprocess.Popen(
            [
                *quotaflow_command(),
                "scheduler",
                "--cluster",
                "flow",
                *options,
                "--replication-factor",
                "3",
                "--min-insync-replicas",
                "2",
            ],
            cwd=ROOT,
            stdout=logs["scheduler"],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*quotaflow_command(), "agent", "--node", "node-1", "--gpu", "8", *options],
            cwd=ROOT,
            stdout=logs["agent"],
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        queue = tmp_path / "queues.yaml"
        queue.write_text("queue: team\nresources:\n  gpu: {quota: 8}\n")
        # The scheduler may still be starting on a loaded machine: wait for its verdicts.
        run("queue", "apply", str(queue), "--wait", "120")
        for index in range(3):
            run("submit", "--queue", "team", "--gpu", "1", "--duration", "1", "--job", f"j{index}")

        async def finished() -> bool:
            from streams.replay import read_journal

            journal = await read_journal(bootstrap, prefix, "flow")
            return len({r.event.job for r in journal if r.event.type == "JobFinished"}) == 3

        asyncio.run(wait_for(finished, "three jobs to finish on the cluster"))
        audit = subprocess.run(
            [*quotaflow_command(), "replay", "--cluster", "flow", *options],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=180,
            check=False,
        )
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert "every command reproduced" in audit.stdout
    finally:
        for process in processes:
            process.terminate()
            process.wait(60)
        for log in logs.values():
            log.close()


async def test_sigkill_of_the_journal_leader_mid_stream(
    all_nodes_up: ClusterHandle, tmp_path: Path
) -> None:
    """0 lost jobs, 0 duplicate dispatches, every command reproduced after the leader dies."""
    bootstrap = all_nodes_up.bootstrap
    topics = await _topics(bootstrap)
    cluster = "leader-kill"
    scheduler = SchedulerProcess(bootstrap, topics, cluster, "solo", tmp_path)
    scheduler.start()
    killed: list[int] = []
    try:
        await wait_for(lambda: asyncio.sleep(0, scheduler.active()), "the scheduler")
        await _configure(bootstrap, topics)
        async with node_agents(bootstrap, topics):

            async def during(index: int) -> None:
                if index == JOBS // 3:
                    leader = await partition_leader(bootstrap, topics.journal)
                    all_nodes_up.kill(leader)
                    killed.append(leader)
                elif index == 2 * JOBS // 3:
                    await asyncio.get_running_loop().run_in_executor(
                        None, all_nodes_up.restart, killed[0]
                    )

            await stream_jobs(bootstrap, topics, range(JOBS), during)
            await wait_for(
                lambda: all_finished(bootstrap, topics, cluster, JOBS), f"all {JOBS} jobs"
            )
        assert scheduler.alive(), scheduler.log()
    finally:
        scheduler.terminate()
    result = await outcome(bootstrap, topics, cluster, JOBS)
    print(f"\njournal leader node {killed[0]} killed: {result}")
    assert result.ok, (result, result.summary)


async def test_standby_takes_over_after_sigkill(
    all_nodes_up: ClusterHandle, tmp_path: Path
) -> None:
    """A standby becomes active within seconds of the active scheduler's death; nothing lost."""
    bootstrap = all_nodes_up.bootstrap
    topics = await _topics(bootstrap)
    cluster = "takeover"
    first = SchedulerProcess(bootstrap, topics, cluster, "first", tmp_path)
    second = SchedulerProcess(bootstrap, topics, cluster, "second", tmp_path)
    first.start()
    takeover: list[float] = []
    try:
        await wait_for(lambda: asyncio.sleep(0, first.active()), "the first scheduler")
        second.start()
        await wait_for(lambda: asyncio.sleep(0, "waits as a standby" in second.log()), "standby")
        await _configure(bootstrap, topics)
        shown = await wait_for(
            lambda: active_scheduler(bootstrap, topics.prefix, cluster), "an announced leader"
        )
        assert shown.instance == "first" and shown.live and shown.standbys == ("second",)
        async with node_agents(bootstrap, topics):

            async def during(index: int) -> None:
                if index == JOBS // 2:
                    first.kill()
                    killed_at = time.monotonic()
                    await wait_for(lambda: asyncio.sleep(0, second.active()), "the takeover", 120)
                    takeover.append(time.monotonic() - killed_at)

            await stream_jobs(bootstrap, topics, range(JOBS), during)
            await wait_for(
                lambda: all_finished(bootstrap, topics, cluster, JOBS), f"all {JOBS} jobs"
            )
        shown = await active_scheduler(bootstrap, topics.prefix, cluster)
        assert shown is not None and shown.instance == "second" and shown.live
    finally:
        first.terminate()
        second.terminate()
    result = await outcome(bootstrap, topics, cluster, JOBS)
    print(f"\ntakeover after SIGKILL of the active scheduler: {takeover[0]:.1f}s; {result}")
    assert "state from the standby at seq" in second.log(), second.log()
    assert result.ok, (result, result.summary)
    assert takeover[0] < 30, takeover  # a ceiling against hanging; the figure is printed
