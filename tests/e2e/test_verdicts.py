"""Verdicts, rejections, status, the job list and accounting end to end: real broker, real `quotaflow` processes."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.test_agent_flow import ROOT, Cluster, quotaflow_command

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]

LONG = "60"  # seconds a command may wait for its verdict: generous for a loaded machine
QUEUES = """\
queue: team-a
resources: {gpu: {quota: 4, limit: 8}}
---
queue: team-b
resources: {gpu: {quota: 4, limit: 8}}
"""


def run(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*quotaflow_command(), *args, *cluster.options],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
        check=False,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def bare(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose topics exist but whose scheduler has not started yet."""
    cluster = Cluster(kafka_bootstrap, f"e2e-{uuid.uuid4().hex[:8]}.", tmp_path, {})
    cluster.run("kafka", "topics")
    try:
        yield cluster
    finally:
        for name in list(cluster.processes):
            cluster.stop(name)


def test_each_producer_waits_for_the_verdict_and_exits_with_it(
    bare: Cluster, tmp_path: Path
) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)

    # No scheduler: a clear message and exit 4 once the bounded wait is over.
    early = run(bare, "submit", "--job", "early", "--queue", "team-a", "--gpu", "1", "--wait", "2")
    assert early.returncode == 4, early
    assert "no scheduler answered within 2s" in early.stderr
    assert "quotaflow status" in early.stderr
    assert "Traceback" not in early.stderr

    bare.start("scheduler", "scheduler")
    # `early` was kept on quotaflow.jobs: the scheduler decides it once it runs (no queue yet).
    jobs_topic = f"{bare.prefix}quotaflow.jobs"

    def early_refused() -> bool:
        listed = run(bare, "rejected", "--json")
        return listed.returncode == 0 and any(
            (r["topic"], r["offset"]) == (jobs_topic, 0) for r in orjson.loads(listed.stdout)
        )

    bare.wait_for("the refusal of `early`", early_refused)
    applied = run(bare, "queue", "apply", str(queues), "--wait", LONG)
    assert applied.returncode == 0, applied
    assert "applied queue team-a: accepted (journal seq" in applied.stdout
    assert "applied queue team-b: accepted (journal seq" in applied.stdout

    accepted = run(
        bare, "submit", "--job", "ok-1", "--queue", "team-a", "--gpu", "1", "--json", "--wait", LONG
    )
    assert accepted.returncode == 0, accepted
    [verdict] = json_lines(accepted.stdout)
    assert verdict["outcome"] == "accepted" and verdict["seq"] > 0
    assert verdict["input"] == "submitted ok-1 to queue team-a"

    typo = run(bare, "submit", "--job", "typo", "--queue", "team-c", "--gpu", "1", "--wait", LONG)
    assert typo.returncode == 1, typo
    assert (
        typo.stderr
        == "quotaflow: submitted typo to queue team-c: rejected: queue 'team-c' does not exist\n"
    )

    for args, reason in [
        (("cancel", "no-such-job"), "job 'no-such-job' does not exist"),
        (("queue", "delete", "nope"), "queue 'nope' does not exist"),
        (("submit", "--job", "ok-1", "--queue", "team-a", "--gpu", "1"), "ok-1"),
    ]:
        refused = run(bare, *args, "--wait", LONG)
        assert refused.returncode == 1, refused
        assert "rejected: " in refused.stderr and reason in refused.stderr, refused.stderr

    configured = run(bare, "cluster", "configure", "--heartbeat-timeout-s", "20", "--wait", LONG)
    assert configured.returncode == 0, configured
    assert (
        "configured heartbeat_timeout_s=20" in configured.stdout and "accepted" in configured.stdout
    )

    cancelled = run(bare, "cancel", "ok-1", "--wait", LONG)
    assert cancelled.returncode == 0 and "cancel of ok-1: accepted" in cancelled.stdout, cancelled

    sent = run(bare, "queue", "delete", "team-b", "--no-wait")
    assert sent.returncode == 0 and "not waiting" in sent.stdout, sent

    # `quotaflow rejected` names each refused input exactly where it was produced.
    listed = run(bare, "rejected", "--json")
    assert listed.returncode == 0, listed
    rows = orjson.loads(listed.stdout)
    by_input = {(r["topic"], r["offset"]): r["reason"] for r in rows}
    assert by_input[(jobs_topic, 0)] == "queue 'team-a' does not exist"  # `early`
    assert any("team-c" in reason for reason in by_input.values())
    assert len(rows) == 5
    table = run(bare, "rejected", "--limit", "2")
    assert table.returncode == 0 and table.stdout.count("\n") == 3, table.stdout  # header + 2
    future = run(bare, "rejected", "--since", "2999-01-01T00:00:00Z", "--json")
    assert orjson.loads(future.stdout) == []


def test_status_job_list_and_gpu_hours_of_a_known_workload(bare: Cluster, tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    bare.start("scheduler", "scheduler")
    bare.start("agent", "agent", "--node", "n1", "--gpu", "8", "--heartbeat-s", "1")
    bare.wait_for_line("agent", "n1: registered")
    assert run(bare, "queue", "apply", str(queues), "--wait", LONG).returncode == 0
    workload = [
        ("alice-1", "team-a", "alice", ["--gpu", "2", "--duration", "2"]),
        ("bob-1", "team-b", "bob", ["--gpu", "1", "--tasks", "2", "--duration", "3"]),
        ("alice-2", "team-b", "alice", ["--gpu", "1", "--duration", "1"]),
        ("carol-1", "team-a", "carol", ["--gpu", "1", "--selector", "zone=nowhere"]),
    ]
    for job, queue, user, extra in workload:
        result = run(
            bare, "submit", "--job", job, "--queue", queue, "--user", user, *extra, "--wait", LONG
        )
        assert result.returncode == 0, result
    for job in ("alice-1", "bob-1", "alice-2"):
        bare.wait_for_line("agent", f"finished {job} attempt 1", "succeeded")
    journal = bare.journal_once(
        "three JobFinished", lambda j: sum(r["type"] == "JobFinished" for r in j) >= 3
    )

    # The job list: live jobs by default, ended ones on request, filtered, with USER.
    def jobs(*args: str) -> list[dict[str, Any]]:
        result = run(bare, "jobs", "--json", *args)
        assert result.returncode == 0, result
        return list(orjson.loads(result.stdout)["jobs"])

    assert [j["job"] for j in jobs()] == ["carol-1"]
    assert [(j["job"], j["state"]) for j in jobs("--all", "--user", "alice")] == [
        ("alice-1", "finished"),
        ("alice-2", "finished"),
    ]
    assert [j["job"] for j in jobs("--all", "--queue", "team-b")] == ["bob-1", "alice-2"]
    assert [j["job"] for j in jobs("--state", "pending")] == ["carol-1"]
    assert [j["job"] for j in jobs("--since", "1h", "--state", "finished", "--user", "bob")] == [
        "bob-1"
    ]
    table = run(bare, "jobs", "--all")
    assert "USER" in table.stdout.splitlines()[1] and "alice" in table.stdout
    assert time.strftime("%Y-", time.gmtime()) in table.stdout  # readable dates, not epoch ms

    # Accounting by hand: GPUs held from the Dispatch's cycle to the JobFinished record.
    dispatched = {
        c["job"]: c["ts"] for c in bare.topic("quotaflow.commands") if c["type"] == "Dispatch"
    }
    finished: dict[str, int] = {}
    for record in journal:
        if record["type"] == "JobFinished":
            finished[record["job"]] = max(finished.get(record["job"], 0), record["ts"])
    hour = 3_600_000
    alice = (
        2 * (finished["alice-1"] - dispatched["alice-1"])
        + (finished["alice-2"] - dispatched["alice-2"])
    ) / hour
    bob = 2 * (finished["bob-1"] - dispatched["bob-1"]) / hour
    assert alice >= (2 * 2 + 1) / 3600 and bob >= 2 * 3 / 3600  # at least the run times
    report = run(bare, "usage", "--by", "user", "--json")
    assert report.returncode == 0, report
    rows = {r["user"]: r for r in orjson.loads(report.stdout)["rows"]}
    assert set(rows) == {"alice", "bob"}  # carol's job never held anything
    assert rows["alice"]["gpu_hours"] == pytest.approx(alice, abs=1e-6)
    assert rows["bob"]["gpu_hours"] == pytest.approx(bob, abs=1e-6)
    assert rows["alice"]["jobs"] == 2
    by_queue = {
        r["queue"]: r
        for r in orjson.loads(run(bare, "usage", "--by", "queue", "--json").stdout)["rows"]
    }
    a_hours = 2 * (finished["alice-1"] - dispatched["alice-1"]) / hour
    assert by_queue["team-a"]["gpu_hours"] == pytest.approx(a_hours, abs=1e-6)
    assert "GPU-HOURS" in run(bare, "usage", "--by", "queue").stdout

    # Status: the scheduler writes, the node heartbeats; then the scheduler stops.
    status = run(bare, "status", "--json")
    assert status.returncode == 0, status
    body = orjson.loads(status.stdout)
    # The scheduler publishes its liveness on quotaflow.status: up, not guessed from the journal.
    assert body["scheduler"]["down"] is False
    assert body["scheduler"]["lag"]["inputs_waiting"] >= 0
    [node] = body["nodes"]
    assert node["node"] == "n1" and not node["lost"]
    assert body["now_ts"] - node["last_heartbeat_ts"] < 60_000
    bare.stop("scheduler")
    late = run(bare, "submit", "--queue", "team-a", "--gpu", "1", "--wait", "1")
    assert late.returncode == 4 and "no scheduler answered" in late.stderr, late


def test_status_prefers_the_schedulers_liveness_record(bare: Cluster) -> None:
    """A scheduler that publishes liveness on quotaflow.status is judged by it, not the journal."""
    import asyncio

    from streams.kafka_io import idempotent_producer

    topic = f"{bare.prefix}quotaflow.status"

    async def create() -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=bare.bootstrap)
        await admin.start()
        try:
            compacted = {"cleanup.policy": "compact"}
            await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=compacted)])
        finally:
            await admin.close()

    async def publish(body: dict[str, Any]) -> None:
        producer = idempotent_producer(bare.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, orjson.dumps(body), key=b"scheduler/default")
        finally:
            await producer.stop()

    asyncio.run(create())
    now = time.time()
    fresh = {"instance": "host-1", "active": True, "published_s": now, "last_tick_s": now - 1}
    asyncio.run(publish(fresh))
    up = run(bare, "status", "--json")
    assert up.returncode == 0, up
    scheduler = orjson.loads(up.stdout)["scheduler"]
    assert scheduler["source"] == "quotaflow.status" and scheduler["instance"] == "host-1"
    assert "instance host-1, active True" in run(bare, "status").stdout
    asyncio.run(publish(fresh | {"published_s": now - 60}))
    stale = run(bare, "status")
    assert stale.returncode == 3 and "DOWN" in stale.stdout, stale
    asyncio.run(publish(fresh | {"published_s": time.time(), "active": False}))
    assert run(bare, "status").returncode == 3
