"""`quotaflow` error paths and offline commands: one clear line on stderr, non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from domain.codec import decode_ingress

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# Nothing listens on port 1: a command that got as far as connecting would fail differently.
NO_BROKER = "127.0.0.1:1"


def quotaflow(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "quotaflow"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "cli"]
    return subprocess.run(
        [*command, *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)},
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode not in (0, None), result
    assert "Traceback" not in result.stderr
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("quotaflow"), result.stderr
    for needle in needles:
        assert needle in result.stderr


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_queue_apply_missing_file(tmp_path: Path) -> None:
    result = quotaflow("queue", "apply", str(tmp_path / "absent.yaml"), "--bootstrap", NO_BROKER)
    assert_one_line_error(result, "absent.yaml", "no such file")


def test_queue_apply_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "queue: a\nresources: {gpu: {quota: 4\n")
    result = quotaflow("queue", "apply", path, "--bootstrap", NO_BROKER)
    assert_one_line_error(result, "not valid YAML", "line")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("queue: Team_A\n", "queue"),
        ("queue: a\nresources: {gpu: {quota: 4, quota_typo: 1}}\n", "unknown field"),
        ("- 1\n- 2\n", "mapping"),
        ("queue: a\nparent: a\n", "own parent"),
        (
            "queue: a\npreemption: {self_level: {high_priority: [3, 5], low_priority: [4, 6], modules: [DLC]}}\n",
            "below",
        ),
    ],
)
def test_queue_apply_invalid_manifest(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, "queues.yaml", text)
    result = quotaflow("queue", "apply", path, "--bootstrap", NO_BROKER)
    assert_one_line_error(result, needle)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--queue", "a", "--gpu", "lots"], "--gpu"),
        (["--queue", "a", "--gpu", "-1"], "--gpu"),
        (["--queue", "a", "--tasks", "0"], "--tasks"),
        (["--queue", "a", "--priority", "12"], "priority"),
        (["--gpu", "1"], "--queue is required"),
        (["--queue", "Not A Queue"], "queue"),
        (["--queue", "a", "--label", "novalue"], "KEY=VALUE"),
        (["--queue", "a", "--tasks", "2", "--min-tasks", "3"], "min_tasks"),
        (["--queue", "a", "--interactive", "--preemptible"], "interactive"),
        (["--queue", "a", "--gpu", "0.0001"], "gpu"),
        (["--queue", "a", "--unknown-flag"], "unrecognized"),
    ],
)
def test_submit_invalid_flags(flags: list[str], needle: str) -> None:
    result = quotaflow("submit", *flags, "--bootstrap", NO_BROKER)
    assert_one_line_error(result, needle)
    assert result.returncode == 2


def test_submit_file_with_an_invalid_job_names_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.yaml",
        "- {job: ok, queue: a, resources: {gpu: 1}}\n- {job: bad, queue: a, resources: {tpu: 1}}\n",
    )
    result = quotaflow("submit", "-f", path, "--bootstrap", NO_BROKER)
    assert_one_line_error(result, "item 2", "tpu")


def test_submit_file_cannot_mix_with_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "job.json", '{"job": "j", "queue": "a"}')
    result = quotaflow("submit", "-f", path, "--gpu", "1", "--bootstrap", NO_BROKER)
    assert_one_line_error(result, "--gpu")


def test_valid_submit_without_a_broker_fails_in_one_line() -> None:
    result = quotaflow("submit", "--queue", "a", "--gpu", "1", "--bootstrap", NO_BROKER)
    assert_one_line_error(result, "cannot reach Kafka")


def test_agent_rejects_a_bad_node_id_before_connecting() -> None:
    result = quotaflow("agent", "--node", "bad node!", "--bootstrap", NO_BROKER)
    assert_one_line_error(result, "node")


def test_unknown_command_and_missing_arguments() -> None:
    assert_one_line_error(quotaflow("teleport"), "invalid choice")
    assert_one_line_error(quotaflow("cancel"), "JOB")
    assert_one_line_error(quotaflow("cluster", "configure", "--placement", "random"), "placement")


def test_queue_apply_dry_run_prints_events_the_scheduler_accepts(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tree.yaml",
        "queue: team-a\nparent: org\nresources: {gpu: {quota: 4, limit: 8}}\n"
        "---\nqueue: org\nresources: {gpu: {quota: 8, limit: -1}}\npolicy: {kind: round_robin}\n",
    )
    result = quotaflow("queue", "apply", path, "--dry-run")
    assert result.returncode == 0, result.stderr
    events = [decode_ingress("quotaflow.admin", line) for line in result.stdout.splitlines()]
    assert [e.queue for e in events] == ["org", "team-a"]  # type: ignore[union-attr]  # parents first


def test_schema_describes_every_event_and_command() -> None:
    result = quotaflow("schema")
    assert result.returncode == 0, result.stderr
    schema = orjson.loads(result.stdout)
    names = {ref["$ref"].rsplit("/", 1)[-1] for ref in schema["oneOf"]}
    assert names == {
        "QueueConfigured",
        "QueueDeleted",
        "ClusterConfigured",
        "JobSubmitted",
        "JobCancelled",
        "NodeHeartbeat",
        "JobStarted",
        "JobFinished",
        "JobPreempted",
        "Tick",
        "NodesAlive",
        "Dispatch",
        "Preempt",
        "Rejected",
    }
    assert schema["$defs"]["JobSubmitted"]["additionalProperties"] is False
    assert "seq" in schema["$defs"]["Dispatch"]["required"]
