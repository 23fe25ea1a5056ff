"""Agents that recover and one agent per node: real broker, real scheduler and agent processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_agent_flow import QUEUES, ROOT, Cluster, cluster, quotaflow_command

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]
__all__ = ["cluster"]  # the fixture, shared with the agent flow tests


def group_alive(pgid: int) -> bool:
    """Whether the process group's leader still runs (a zombie awaiting its reaper does not)."""
    try:
        stat = Path(f"/proc/{pgid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def test_a_killed_agent_restarts_stops_its_orphan_and_its_job_comes_back_at_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    # A long timeout: only the restart's heartbeat can explain a requeue, not node loss.
    cluster.run("cluster", "configure", "--heartbeat-timeout-s", "600")
    cluster.run("queue", "apply", str(queues))
    agent = ["agent", "--node", "n1", "--gpu", "8", "--exec", "--heartbeat-s", "1"]
    cluster.start("first", *agent)
    cluster.wait_for_line("first", "n1: registered", "incarnation 1")
    cluster.run(
        "submit", "--job", "train", "--queue", "team-a", "--gpu", "8",
        "--label", "command=sleep 3600",
    )  # fmt: skip
    started = cluster.wait_for_line("first", "dispatch train attempt 1", "started pid")
    pgid = int(re.search(r"started pid (\d+)", started).group(1))  # type: ignore[union-attr]
    assert group_alive(pgid)

    os.killpg(cluster.processes.pop("first").pid, signal.SIGKILL)  # no goodbye
    assert group_alive(pgid)  # the job's process group outlives its agent

    cluster.start("second", *agent)
    cluster.wait_for_line("second", f"stopped process group {pgid} of train attempt 1")
    cluster.wait_for_line("second", "n1: registered", "incarnation 2")
    assert not group_alive(pgid)  # stopped before the restart's first heartbeat
    cluster.wait_for_line("second", "dispatch train attempt 2", "started pid")

    journal = cluster.journal_once(
        "JobStarted of attempt 2",
        lambda j: any(e["type"] == "JobStarted" and e["attempt"] == 2 for e in j),
    )
    beats = [e for e in journal if e["type"] == "NodeHeartbeat" and e["node"] == "n1"]
    restart = next(e for e in beats if e["incarnation"] == 2)
    assert restart["running"] == []
    (again,) = [
        c
        for c in cluster.topic("quotaflow.commands")
        if c["type"] == "Dispatch" and c["job"] == "train" and c["attempt"] == 2
    ]
    # Requeued and dispatched by the cycle of the restart's own heartbeat: within one heartbeat.
    assert [e["seq"] for e in beats if restart["seq"] <= e["seq"] <= again["seq"]] == [
        restart["seq"]
    ]
    assert (again["node"], again["incarnation"]) == ("n1", 2)
    assert "every command reproduced" in cluster.run("replay")


def test_a_second_agent_for_a_node_on_the_same_machine_fails_at_once(cluster: Cluster) -> None:
    cluster.start("holder", "agent", "--node", "n1", "--heartbeat-s", "1")
    cluster.wait_for_line("holder", "n1: registered")
    result = subprocess.run(
        [*quotaflow_command(), "agent", "--node", "n1", *cluster.options],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert "node n1 is already run by another agent on this machine (pid" in line
    assert "stop that agent first, or give this one another --node" in line


def test_a_second_agent_for_a_live_node_elsewhere_is_refused_by_the_scheduler(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start("holder", "agent", "--node", "n1", "--heartbeat-s", "1")
    cluster.wait_for_line("holder", "n1: registered")
    elsewhere = tmp_path / "another-machine"  # its own state: a different agent instance
    result = subprocess.run(
        [*quotaflow_command(), "agent", "--node", "n1", "--state-dir", str(elsewhere),
         *cluster.options],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode != 0, result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert "the scheduler refused this agent's heartbeat: node 'n1' is held by agent" in line
    assert "stop the other agent, or start this one with another --node name" in line
    assert cluster.processes["holder"].poll() is None  # the holder runs on
