"""The walking skeleton end to end: real broker, real `quotaflow scheduler` and `quotaflow agent` processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.kafka_io import Topics, read_to_end

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 90  # a generous ceiling so a stuck flow fails instead of hanging; not a speed check

DISPATCH_FIELDS = {"type", "job", "node", "tasks", "resources", "attempt", "seq", "ts", "reason"}
PREEMPT_FIELDS = {"type", "job", "node", "tasks", "attempt", "seq", "ts", "reason", "by"}


def quotaflow_command() -> list[str]:
    script = Path(sys.executable).parent / "quotaflow"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli"]


@dataclass
class Cluster:
    """One isolated QuotaFlow cluster on the shared broker: its own topic prefix and processes."""

    bootstrap: str
    prefix: str
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]]

    @property
    def options(self) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--topic-prefix", self.prefix]

    def run(self, *args: str) -> str:
        result = subprocess.run(
            [*quotaflow_command(), *args, *self.options],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"quotaflow {' '.join(args)}: {result.stderr}"
        return result.stdout

    def start(self, name: str, *args: str) -> None:
        with (
            (self.logs / f"{name}.out").open("wb") as out,
            (self.logs / f"{name}.err").open("wb") as err,
        ):
            self.processes[name] = subprocess.Popen(
                [*quotaflow_command(), *args, *self.options],
                stdout=out,
                stderr=err,
                cwd=ROOT,
                start_new_session=True,
            )

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def output(self, name: str) -> list[str]:
        return (self.logs / f"{name}.out").read_text().splitlines()

    def wait_for(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not check():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    err = (self.logs / f"{name}.err").read_text()[-2000:]
                    pytest.fail(
                        f"{name} exited with {process.returncode} waiting for {what}:\n{err}"
                    )
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {WAIT_S}s; logs in {self.logs}")
            time.sleep(0.2)

    def wait_for_line(self, name: str, *needles: str) -> str:
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.output(name) if all(n in line for n in needles)]
            return bool(found)

        self.wait_for(f"{name} line with {needles}", seen)
        return found[0]

    def journal_once(
        self, what: str, ready: Callable[[list[dict[str, Any]]], bool]
    ) -> list[dict[str, Any]]:
        """The journal once it holds `what`: an agent prints its report before the scheduler
        has journaled it, so reading the journal at once would race."""
        journal: list[dict[str, Any]] = []

        def holds() -> bool:
            journal[:] = self.topic("quotaflow.journal")
            return ready(journal)

        self.wait_for(what, holds)
        return journal

    def topic(self, logical: str) -> list[dict[str, Any]]:
        topics = Topics.for_prefix(self.prefix)
        name = topics.name(logical)
        records = asyncio.run(read_to_end(self.bootstrap, name))[name]
        return [orjson.loads(r.value) for r in records if r.value is not None]


@pytest.fixture
def cluster(
    kafka_bootstrap: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Cluster]:
    monkeypatch.setenv("QUOTAFLOW_STATE_DIR", str(tmp_path / "agent-state"))
    prefix = f"e2e-{uuid.uuid4().hex[:8]}."
    cluster = Cluster(kafka_bootstrap, prefix, tmp_path, {})
    partitions = getattr(request, "param", 1)
    cluster.run("kafka", "topics", "--command-partitions", str(partitions))
    cluster.start("scheduler", "scheduler")
    try:
        yield cluster
    finally:
        for name in list(cluster.processes):
            cluster.stop(name)


QUEUES = """\
queue: org
resources: {gpu: {quota: 8, limit: -1}}
---
queue: team-a
parent: org
resources: {gpu: {quota: 8, limit: 8}}
"""


def test_agent_runs_dispatched_jobs_and_the_topics_hold_the_contract(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start("agent", "agent", "--node", "n1", "--gpu", "8", "--heartbeat-s", "1")
    cluster.wait_for_line("agent", "n1: registered")
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    assert "applied queue team-a" in cluster.run("queue", "apply", str(queues))
    cluster.run("submit", "--job", "short", "--queue", "team-a", "--gpu", "2", "--duration", "1")
    cluster.run(
        "submit",
        "--job",
        "gang",
        "--queue",
        "team-a",
        "--gpu",
        "1",
        "--tasks",
        "3",
        "--duration",
        "1",
    )
    cluster.run("submit", "--job", "long", "--queue", "team-a", "--gpu", "1", "--duration", "3600")

    cluster.wait_for_line("agent", "finished short attempt 1", "succeeded")
    cluster.wait_for_line("agent", "finished gang attempt 1", "succeeded")
    assert "started" in cluster.wait_for_line("agent", "dispatch long attempt 1")
    cluster.run("cancel", "long")
    cluster.wait_for_line("agent", "preempt long attempt 1", "preempted")

    journal = cluster.journal_once(
        "JobPreempted of long", lambda j: any(e["type"] == "JobPreempted" for e in j)
    )
    seqs = [record["seq"] for record in journal]
    assert seqs == list(range(1, len(journal) + 1))
    assert [r["ts"] for r in journal] == sorted(r["ts"] for r in journal)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in journal:
        by_type.setdefault(record["type"], []).append(record)
    assert [q["queue"] for q in by_type["QueueConfigured"]] == ["org", "team-a"]
    assert {j["job"] for j in by_type["JobSubmitted"]} == {"short", "gang", "long"}
    assert by_type["NodeHeartbeat"][0]["capacity"] == {"gpu": 8, "cpu": 64000, "memory": 512000}
    started = {(e["job"], e["node"], e["attempt"]) for e in by_type["JobStarted"]}
    assert started == {("short", "n1", 1), ("gang", "n1", 1), ("long", "n1", 1)}
    finished = {(e["job"], e["attempt"], e["outcome"]) for e in by_type["JobFinished"]}
    assert finished == {("short", 1, "succeeded"), ("gang", 1, "succeeded")}
    assert [(e["job"], e["attempt"]) for e in by_type["JobPreempted"]] == [("long", 1)]
    assert [e["job"] for e in by_type["JobCancelled"]] == ["long"]

    commands = cluster.topic("quotaflow.commands")
    dispatches = [c for c in commands if c["type"] == "Dispatch"]
    assert {c["job"]: (c["node"], c["tasks"], c["attempt"], c["reason"]) for c in dispatches} == {
        "short": ("n1", 1, 1, "quota"),
        "gang": ("n1", 3, 1, "quota"),
        "long": ("n1", 1, 1, "quota"),
    }
    extra = {"duration_s", "incarnation", "devices"}
    assert all(set(c) == DISPATCH_FIELDS | extra for c in dispatches)
    # Each task is on whole devices of its own among n1's 8 (a finished job's are reused).
    shapes = {c["job"]: [len(task) for task in c["devices"]] for c in dispatches}
    assert shapes == {"short": [2], "gang": [1, 1, 1], "long": [1]}
    for dispatch in dispatches:
        used = [index for task in dispatch["devices"] for index in task]
        assert len(used) == len(set(used)) and set(used) <= set(range(8)), dispatch
    assert {c["job"]: c["duration_s"] for c in dispatches} == {
        "short": 1.0,
        "gang": 1.0,
        "long": 3600.0,
    }  # the agent runs a job from its Dispatch alone: it never reads the journal
    assert {c["incarnation"] for c in dispatches} == {1}
    by_seq = {record["seq"]: record for record in journal}
    for command in commands:
        # seq names the journal record whose group caused the command; ts is that record's.
        assert by_seq[command["seq"]]["ts"] == command["ts"]
    for started_event in by_type["JobStarted"]:
        dispatch = next(c for c in dispatches if c["job"] == started_event["job"])
        assert started_event["seq"] > dispatch["seq"]
    (preempt,) = [c for c in commands if c["type"] == "Preempt"]
    assert set(preempt) == PREEMPT_FIELDS
    assert (preempt["job"], preempt["node"], preempt["attempt"]) == ("long", "n1", 1)
    assert preempt["reason"] == "cancelled"  # the core's extension of the contract's list
    assert preempt["seq"] >= by_type["JobCancelled"][0]["seq"]

    audit = cluster.run("replay")
    assert "every command reproduced" in audit


def test_restarted_agent_does_not_replay_old_commands(cluster: Cluster, tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    cluster.run("queue", "apply", str(queues))
    cluster.start("agent", "agent", "--node", "n1", "--heartbeat-s", "1")
    cluster.wait_for_line("agent", "n1: registered")
    cluster.run("submit", "--job", "before", "--queue", "team-a", "--gpu", "1", "--duration", "0.5")
    cluster.wait_for_line("agent", "finished before attempt 1", "succeeded")
    cluster.stop("agent")

    cluster.start("agent-again", "agent", "--node", "n1", "--heartbeat-s", "1")
    cluster.wait_for_line("agent-again", "n1: registered")
    cluster.run("submit", "--job", "after", "--queue", "team-a", "--gpu", "1", "--duration", "0.5")
    cluster.wait_for_line("agent-again", "finished after attempt 1", "succeeded")
    assert not [line for line in cluster.output("agent-again") if "before" in line]


def test_exec_agent_runs_the_command_and_reports_its_exit_code(
    cluster: Cluster, tmp_path: Path
) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    cluster.run("queue", "apply", str(queues))
    cluster.start(
        "agent", "agent", "--node", "x1", "--exec", "--label", "runs=commands", "--heartbeat-s", "1"
    )
    cluster.wait_for_line("agent", "x1: registered")
    marker = tmp_path / "ran"
    python = sys.executable
    cluster.run(
        "submit", "--job", "ok", "--queue", "team-a", "--selector", "runs=commands",
        "--label", f"command={python} -c \"open('{marker}', 'w').write('yes')\"",
    )  # fmt: skip
    cluster.run(
        "submit", "--job", "fails", "--queue", "team-a", "--selector", "runs=commands",
        "--label", f"command={python} -c 'raise SystemExit(3)'",
    )  # fmt: skip
    cluster.run(
        "submit", "--job", "sleeps", "--queue", "team-a", "--selector", "runs=commands",
        "--label", "command=sleep 3600",
    )  # fmt: skip
    cluster.wait_for_line("agent", "finished ok attempt 1", "exit 0", "succeeded")
    cluster.wait_for_line("agent", "finished fails attempt 1", "exit 3", "failed")
    assert marker.read_text() == "yes"
    cluster.wait_for_line("agent", "dispatch sleeps", "started pid")
    cluster.run("cancel", "sleeps")
    cluster.wait_for_line("agent", "preempt sleeps attempt 1", "stopped, preempted")

    journal = cluster.journal_once(
        "JobPreempted of sleeps", lambda j: any(e["type"] == "JobPreempted" for e in j)
    )
    outcomes = {(e["job"], e["outcome"]) for e in journal if e["type"] == "JobFinished"}
    assert outcomes == {("ok", "succeeded"), ("fails", "failed")}
    assert [e["job"] for e in journal if e["type"] == "JobPreempted"] == ["sleeps"]


@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_agents_read_only_their_own_partition_of_commands(cluster: Cluster, tmp_path: Path) -> None:
    # With 3 partitions, n1 hashes to partition 1 and n3 to partition 0 (Kafka's murmur2).
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    cluster.run("queue", "apply", str(queues))
    for node in ("n1", "n3"):
        cluster.start(
            node, "agent", "--node", node, "--label", f"name={node}", "--heartbeat-s", "1"
        )
    assert "commands partition 1" in cluster.wait_for_line("n1", "n1: registered")
    assert "commands partition 0" in cluster.wait_for_line("n3", "n3: registered")
    for node in ("n1", "n3"):
        cluster.run(
            "submit", "--job", f"on-{node}", "--queue", "team-a", "--gpu", "1",
            "--selector", f"name={node}", "--duration", "0.5",
        )  # fmt: skip
    cluster.wait_for_line("n1", "finished on-n1 attempt 1", "succeeded")
    cluster.wait_for_line("n3", "finished on-n3 attempt 1", "succeeded")
    assert not [line for line in cluster.output("n1") if "on-n3" in line]
    assert not [line for line in cluster.output("n3") if "on-n1" in line]


def test_lost_node_requeues_its_job_to_another_agent_with_a_new_attempt(
    cluster: Cluster, tmp_path: Path
) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    cluster.run("cluster", "configure", "--heartbeat-timeout-s", "3")
    cluster.run("queue", "apply", str(queues))
    cluster.start("doomed", "agent", "--node", "doomed", "--heartbeat-s", "1")
    cluster.wait_for_line("doomed", "doomed: registered")
    cluster.run("submit", "--job", "survivor", "--queue", "team-a", "--gpu", "4", "--duration", "5")
    cluster.wait_for_line("doomed", "dispatch survivor attempt 1", "started")
    # SIGKILL: no goodbye, the heartbeats just stop.
    os.killpg(cluster.processes.pop("doomed").pid, signal.SIGKILL)
    cluster.start("spare", "agent", "--node", "spare", "--heartbeat-s", "1")
    cluster.wait_for_line("spare", "dispatch survivor attempt 2", "started")
    cluster.wait_for_line("spare", "finished survivor attempt 2", "succeeded")

    dispatches = [
        (c["node"], c["attempt"])
        for c in cluster.topic("quotaflow.commands")
        if c["type"] == "Dispatch" and c["job"] == "survivor"
    ]
    assert dispatches == [("doomed", 1), ("spare", 2)]
    journal = cluster.journal_once(
        "JobFinished of survivor", lambda j: any(e["type"] == "JobFinished" for e in j)
    )
    finished = [(e["node"], e["attempt"]) for e in journal if e["type"] == "JobFinished"]
    assert finished == [("spare", 2)]
