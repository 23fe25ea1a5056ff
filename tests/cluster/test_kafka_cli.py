"""`quotaflow kafka start --brokers 3`, `status` and `stop` as real processes (real Kafka)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devtools.kafka_home import ensure_jars, project_root
from tests.cluster.flow import ROOT, quotaflow_command

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_kafka_start_three_brokers_status_and_stop(tmp_path: Path) -> None:
    (tmp_path / ".kafka").mkdir()
    # The jars once, shared; the state file and data dirs in this test's own home.
    (tmp_path / ".kafka" / "libs").symlink_to(ensure_jars(project_root()))
    env = {**os.environ, "QUOTAFLOW_HOME": str(tmp_path)}
    env.pop("QUOTAFLOW_BOOTSTRAP", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*quotaflow_command(), "kafka", *args],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False,
        )  # fmt: skip

    started = run("start", "--brokers", "3", "--topic-prefix", "cli.")
    try:
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        assert len(bootstrap.split(",")) == 3
        assert started.stderr.count(" started (pid ") == 3
        status = run("status")
        assert status.returncode == 0 and status.stdout.strip() == bootstrap
        assert status.stderr.count(" running (pid ") == 3
        again = run("start", "--brokers", "3", "--no-topics")
        assert again.stdout.strip() == bootstrap and again.stderr.count("already running") == 3
        for node in (1, 2, 3):
            assert (tmp_path / ".kafka" / "cluster" / f"broker-{node}" / "kraft-logs").is_dir()
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0 and "stopped the cluster" in stopped.stdout
    assert run("status").returncode == 3
