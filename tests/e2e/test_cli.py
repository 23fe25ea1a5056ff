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
        (["--queue", "a", "--unknown-flag"], "No such option '--unknown-flag'"),
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
    assert_one_line_error(quotaflow("teleport"), "no such command 'teleport'")
    assert_one_line_error(quotaflow("cancel"), "JOB")
    assert_one_line_error(quotaflow("cluster", "configure", "--placement", "random"), "placement")


def test_typos_get_a_suggestion() -> None:
    result = quotaflow("sumbit", "--queue", "a")
    assert_one_line_error(result, "no such command 'sumbit'", "did you mean submit?")
    assert result.returncode == 2
    result = quotaflow("submit", "--usr", "alice", "--queue", "a")
    assert_one_line_error(result, "--usr", "--user")
    assert_one_line_error(quotaflow("queue", "aply", "x.yaml"), "did you mean apply?")


def test_help_per_command_and_shell_completion() -> None:
    assert "--min-tasks" in quotaflow("submit", "--help").stdout
    assert "--dry-run" in quotaflow("queue", "apply", "--help").stdout
    script = Path(sys.executable).parent / "quotaflow"
    completion = subprocess.run(
        [str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(ROOT),
            "COMP_WORDS": "quotaflow sub",
            "COMP_CWORD": "1",
            "_QUOTAFLOW_COMPLETE": "bash_complete",
        },
    )
    assert "submit" in completion.stdout.split()[0], completion


def test_every_option_has_an_environment_default(tmp_path: Path) -> None:
    journal = write(tmp_path, "journal.jsonl", "")
    script = Path(sys.executable).parent / "quotaflow"
    result = subprocess.run(
        [str(script), "jobs", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(ROOT),
            "QUOTAFLOW_JOBS_FILE": journal,
            "QUOTAFLOW_JOBS_STATE": "nonsense",
        },
    )
    assert_one_line_error(result, "nonsense")  # the variable reached --state


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


def test_watch_redraws_a_view_until_stopped(tmp_path: Path) -> None:
    from domain.codec import encode_journal
    from tests.domain.harness import job, queue
    from tests.projections.journal import Journal

    j = Journal()
    j.at(1_000, queue("a", 4))
    j.at(2_000, job("w1", "a", gpu=1, user="erin"))
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(encode_journal(r) + b"\n" for r in j.records))
    script = Path(sys.executable).parent / "quotaflow"
    watcher = subprocess.Popen(
        [str(script), "jobs", "--file", str(path), "--watch", "0.2"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert watcher.stdout is not None
        seen: list[str] = []
        for line in watcher.stdout:  # ends when the process does: a redraw loop must not
            seen.append(line)
            if sum(line.startswith("every 0.2s") for line in seen) >= 2:
                break
        assert sum(line.startswith("every 0.2s") for line in seen) >= 2, seen
        assert any("w1" in line and "erin" in line for line in seen)
    finally:
        watcher.terminate()
        watcher.wait(timeout=60)
