"""Operations end to end on a real broker and real processes: /metrics of the scheduler, the agent and
the projections parsed with prometheus-client's parser and checked against a known workload, /health
and the liveness on quotaflow.status, and the dashboard in a real headless Chromium."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.kafka_io import Topics, idempotent_producer
from streams.status import read_status, verdict
from tests.e2e.browser import chromium_path, headless
from tests.e2e.projections_process import free_port

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0

pytestmark = pytest.mark.e2e

QUEUES = """\
queue: org
resources: {gpu: {quota: 4, limit: -1}}
---
queue: team-a
parent: org
resources: {gpu: {quota: 2, limit: 4}}
---
queue: team-b
parent: org
resources: {gpu: {quota: 2, limit: 4}}
"""
# The workload: 4 GPUs on one node; a-1, a-2 and b-1 fill them, b-2 waits, one job names a
# queue that does not exist (refused), and one input is not JSON (invalid).
JOBS = (("a-1", "team-a", 1), ("a-2", "team-a", 1), ("b-1", "team-b", 2), ("b-2", "team-b", 1))


@dataclass
class Cluster:
    bootstrap: str
    topics: Topics
    scheduler_port: int
    agent_port: int
    projections_port: int
    logs: Path


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(ROOT)}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip


def _get(port: int, path: str) -> bytes | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return bytes(response.read())
    except OSError:
        return None


def _json(port: int, path: str) -> Any:
    raw = _get(port, path)
    return None if raw is None else orjson.loads(raw)


def _until(probe: Any, what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.3)


def metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page, parsed by prometheus-client: (name, labels) -> value."""
    raw = _get(port, "/metrics")
    assert raw is not None, f"no /metrics on port {port}"
    out = {}
    for family in text_string_to_metric_families(raw.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("operations")
    prefix = f"ops-{uuid.uuid4().hex[:8]}."
    topics = Topics.for_prefix(prefix)
    ports = free_port(), free_port(), free_port()
    common = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
    commands = {
        "scheduler": ["scheduler", *common, "--metrics-port", str(ports[0])],
        "agent": [
            "agent", *common, "--node", "node-1", "--gpu", "4", "--heartbeat-s", "1",
            "--state-dir", str(logs / "agent-state"), "--metrics-port", str(ports[1]),
        ],
        "projections": [
            "projections", *common, "--port", str(ports[2]), "--no-checkpoint",
        ],
    }  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in commands.items():
            with (logs / f"{name}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "cli", *args], cwd=ROOT, env=_env(),
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                )  # fmt: skip
            if name == "scheduler":  # it creates the topics the others read
                _until(lambda: "started" in (logs / "scheduler.log").read_text(), "the scheduler")
        queues = logs / "queues.yaml"
        queues.write_text(QUEUES)
        assert _cli("queue", "apply", str(queues), *common).returncode == 0
        _until(lambda: (_json(ports[2], "/queues") or {}).get("queues", [None] * 3)[2:], "queues")
        for job, queue, gpu in JOBS:
            done = _cli(
                "submit", *common, "--job", job, "--queue", queue, "--gpu", str(gpu),
                "--duration", "900", "--user", "alice",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            if job == "b-1":  # dispatched before b-2 is submitted: b-2 is the one that waits
                _until(lambda: _running(ports[2]) == 3, "three jobs running")
        typo = _cli("submit", *common, "--job", "typo", "--queue", "nope", "--gpu", "1")
        assert typo.returncode in (0, 1), typo.stderr  # refused by the scheduler either way
        asyncio.run(_send_garbage(kafka_bootstrap, topics))
        _until(lambda: _pending(ports[2]) == ["b-2"], "b-2 pending")
        yield Cluster(kafka_bootstrap, topics, *ports, logs)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _running(port: int) -> int:
    jobs = (_json(port, "/jobs") or {}).get("jobs", [])
    return sum(1 for job in jobs if job["status"] == "running")


def _pending(port: int) -> list[str]:
    jobs = (_json(port, "/jobs") or {}).get("jobs", [])
    return [job["job"] for job in jobs if job["status"] == "pending"]


async def _send_garbage(bootstrap: str, topics: Topics) -> None:
    producer = idempotent_producer(bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topics.jobs, b"this is not json", key=b"garbage")
    finally:
        await producer.stop()


def test_metrics_of_scheduler_agent_and_projections(cluster: Cluster) -> None:
    def scheduler_done() -> dict[Any, float] | None:
        samples = metrics(cluster.scheduler_port)
        done = value(samples, "quotaflow_rejections_total", kind="invalid") == 1
        return (
            samples
            if done and value(samples, "quotaflow_rejections_total", kind="refused") == 1
            else None
        )

    s = _until(scheduler_done, "the scheduler to count both rejections")
    assert value(s, "quotaflow_queue_jobs", queue="team-a", status="running") == 2
    assert value(s, "quotaflow_queue_jobs", queue="team-b", status="running") == 1
    assert value(s, "quotaflow_queue_jobs", queue="team-b", status="pending") == 1
    assert value(s, "quotaflow_queue_allocated", queue="org", resource="gpu") == 4
    assert value(s, "quotaflow_queue_allocated", queue="team-b", resource="gpu") == 2
    assert value(s, "quotaflow_queue_deserved", queue="team-a", resource="gpu") == 2
    assert value(s, "quotaflow_queue_limit", queue="team-a", resource="gpu") == 4
    assert value(s, "quotaflow_queue_fair_share", queue="team-a", resource="gpu") == 2
    assert value(s, "quotaflow_nodes", state="live") == 1
    assert value(s, "quotaflow_nodes", state="lost") == 0
    dispatches = {k[1]: v for k, v in s.items() if k[0] == "quotaflow_dispatches_total"}
    assert sum(dispatches.values()) == 3, dispatches
    assert value(s, "quotaflow_scheduler_active") == 1
    assert (value(s, "quotaflow_journal_seq") or 0) >= 8  # config, 3 queues, heartbeat, 4 jobs
    assert (value(s, "quotaflow_scheduler_cycle_seconds_count") or 0) > 0
    assert (value(s, "quotaflow_scheduler_transaction_seconds_count") or 0) > 0
    assert value(s, "quotaflow_scheduler_ingress_lag_records") is not None

    agent = _until(
        lambda: (
            (m := metrics(cluster.agent_port))
            and value(m, "quotaflow_agent_running_jobs") == 3
            and m
        ),
        "the agent to run three jobs",
    )
    assert value(agent, "quotaflow_agent_commands_total", type="Dispatch") == 3
    assert value(agent, "quotaflow_agent_reports_total", type="JobStarted") == 3
    assert (value(agent, "quotaflow_agent_reports_total", type="NodeHeartbeat") or 0) >= 1

    p = metrics(cluster.projections_port)
    assert value(p, "quotaflow_queue_jobs", queue="team-b", status="pending") == 1
    assert value(p, "quotaflow_queue_allocated", queue="org", resource="gpu") == 4
    assert (value(p, "quotaflow_projections_journal_seq") or 0) >= 8
    assert value(p, "quotaflow_projections_lag_records") is not None


async def test_health_and_liveness_on_the_status_topic(cluster: Cluster) -> None:
    health = _until(
        lambda: (h := _json(cluster.scheduler_port, "/health")) and h["ingress_lag"] == 0 and h,
        "the scheduler to have read every input",
    )
    assert health["active"] is True and health["cluster"] == "default"
    assert health["last_journal_write_s"] is not None
    assert "last_tick_s" in health  # None while heartbeats keep the journal busy
    projections = _json(cluster.projections_port, "/health")
    assert projections["liveness"]["lag"] == 0
    assert projections["liveness"]["last_record_s"] is not None
    agent = _json(cluster.agent_port, "/health")
    assert agent["node"] == "node-1" and agent["running_jobs"] == 3

    # The status record is published every PUBLISH_S: the one read may predate the last
    # inputs, so it is read again until it has caught up with the journal.
    deadline = time.monotonic() + WAIT_S
    while True:
        status = await read_status(cluster.bootstrap, cluster.topics.prefix)
        record = status["scheduler/default"]
        if record["journal_seq"] >= 8 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert record["instance"] == health["instance"]
    assert verdict(record, time.time()) == "up"
    assert record["journal_seq"] >= 8  # config, 3 queues, heartbeat, 4 jobs


async def test_dashboard_in_headless_chromium(cluster: Cluster, tmp_path: Path) -> None:
    if chromium_path() is None:
        pytest.skip(
            "Chromium is not installed (apt-get install -y chromium; scripts/test does it as root)"
        )
    url = f"http://127.0.0.1:{cluster.projections_port}/"
    # Screenshots go under pytest's temporary directory, or $QUOTAFLOW_SCREENSHOTS (never git).
    shots = Path(os.environ.get("QUOTAFLOW_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    async with headless(tmp_path / "chromium-profile") as page:
        await page.goto(url)
        shown = await _until_page(
            page,
            """(() => {
              const text = (id) => document.querySelector(`#${id} tbody`).innerText;
              return {
                queues: text('queues'), pending: text('pending'), running: text('running'),
                rejections: text('rejections'), nodes: text('nodes'),
                series: [...document.querySelectorAll('#usage path.series')].map(p => p.dataset.queue),
                bars: document.querySelectorAll('#queues rect.alloc').length,
                status: document.getElementById('status').className,
              };
            })()""",
            lambda v: v["series"] and "b-2" in v["pending"] and "nope" in v["rejections"],
        )
        for queue in ("org", "team-a", "team-b"):
            assert queue in shown["queues"]
        assert sorted(shown["series"]) == ["team-a", "team-b"]  # the leaves, stacked
        assert shown["bars"] >= 3
        for job in ("a-1", "a-2", "b-1"):
            assert job in shown["running"]
        assert "node-1" in shown["nodes"]
        assert "ok" in shown["status"]
        overview = await page.screenshot(shots / "dashboard.png")

        await page.goto(url + "#/job/b-2")
        job = await _until_page(
            page,
            """(() => ({summary: document.getElementById('job-summary').innerText,
                         timeline: document.querySelector('#timeline tbody').innerText}))()""",
            lambda v: "pending" in v["summary"],
        )
        assert "submitted" in job["timeline"]
        job_page = await page.screenshot(shots / "dashboard-job.png")
    print(f"\ndashboard screenshots: {overview} {job_page}")


async def _until_page(page: Any, expression: str, ready: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = await page.evaluate(expression)
        except RuntimeError:
            last = None  # the page is still loading
        if last and ready(last):
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"the dashboard never showed it; last seen: {last}")


def test_compose_healthchecks_pass_against_the_real_processes(cluster: Cluster) -> None:
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name, port in (
        ("scheduler", cluster.scheduler_port),
        ("agent-1", cluster.agent_port),
        ("projections", cluster.projections_port),
    ):
        probe = re.sub(
            r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", services[name]["healthcheck"]["test"][-1]
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, f"{name}: {done.stderr}"
