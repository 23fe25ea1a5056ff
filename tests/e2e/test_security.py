"""A secured broker end to end: TLS, SCRAM users per role, ACLs, per-team job topics, the API token.

One secured broker is started for this module only, with ``quotaflow kafka start --secure``
under its own ``QUOTAFLOW_HOME``; real ``quotaflow`` processes connect as each role's user
with what ``quotaflow kafka env USER`` exports.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from devtools.security import ADMIN_USER
from streams.kafka_io import KafkaSecurity, Topics, read_to_end, use_security

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120  # generous: the machine may be loaded; a ceiling, not a speed check
TEAMS = ("team-a", "team-b")
TOKEN = "api-token-for-tests"
QUEUES = """\
queue: org
resources: {gpu: {quota: 8}}
---
queue: team-a
parent: org
resources: {gpu: {quota: 4}}
---
queue: team-b
parent: org
resources: {gpu: {quota: 4}}
"""


@dataclass
class Secured:
    """The broker of `quotaflow kafka start --secure`, run under its own QUOTAFLOW_HOME."""

    home: Path
    logs: Path
    bootstrap: str = ""
    users: dict[str, dict[str, str]] = field(default_factory=dict)

    def base_env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.logs), "QUOTAFLOW_HOME": str(self.home)}

    def env(self, user: str) -> dict[str, str]:
        """What `eval "$(quotaflow kafka env USER)"` exports, read once per user."""
        if user not in self.users:
            printed = self.run(None, "kafka", "env", user)
            assert printed.returncode == 0, printed.stderr
            exports = [line.removeprefix("export ") for line in printed.stdout.splitlines()]
            pairs = (line.split("=", 1) for line in exports)
            self.users[user] = {name: shlex.split(value)[0] for name, value in pairs}
        return self.users[user]

    def security(self, user: str) -> KafkaSecurity:
        env = self.env(user)
        return KafkaSecurity.from_env({k: v for k, v in env.items() if k != "QUOTAFLOW_TEAM"})

    def run(
        self, user: str | None, *args: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = self.base_env() | (self.env(user) if user else {})
        env.pop("QUOTAFLOW_TEAM", None)  # tests say which topic they write to
        return subprocess.run(
            [*quotaflow_command(), *args],
            capture_output=True,
            text=True,
            cwd=self.logs,
            env=env | (extra_env or {}),
            timeout=WAIT_S,
            check=False,
        )

    def start(self, user: str, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                [*quotaflow_command(), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.logs,
                env=self.base_env() | self.env(user),
                start_new_session=True,
            )

    def read(self, *topics: str) -> dict[str, list[Any]]:
        """Every record of the topics, read as the admin (a test's view, not a role's)."""
        use_security(self.security(ADMIN_USER))
        try:
            found = asyncio.run(read_to_end(self.bootstrap, list(topics)))
        finally:
            use_security(None)
        return {topic: [orjson.loads(r.value) for r in found[topic]] for topic in topics}


def quotaflow_command() -> list[str]:
    script = Path(sys.executable).parent / "quotaflow"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli"]


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """`quotaflow kafka start --secure` with two teams, and a scheduler running as its user."""
    from devtools.kafka_home import ensure_jars, project_root

    home = tmp_path_factory.mktemp("secure-home")
    # Its own QUOTAFLOW_HOME keeps it apart from a developer's broker; the jars are shared.
    (home / ".kafka").mkdir()
    (home / ".kafka" / "libs").symlink_to(ensure_jars(project_root()))
    cluster = Secured(home, tmp_path_factory.mktemp("secure-logs"))
    started = cluster.run(
        None, "kafka", "start", "--secure", "--team", "team-a", "--team", "team-b"
    )
    assert started.returncode == 0, started.stderr
    cluster.bootstrap = started.stdout.strip()
    topics = Topics.for_prefix("")
    scheduler = None
    try:
        scheduler = cluster.start(
            "scheduler", "scheduler", "scheduler", "--team", "team-a", "--team", "team-b"
        )
        applied = cluster.run("operator", "queue", "apply", str(write(cluster.logs, QUEUES)))
        assert applied.returncode == 0, applied.stderr
        wait_for(
            lambda: len(cluster.read(topics.journal)[topics.journal]) >= 3,
            "the scheduler to journal the operator's queues",
        )
        yield cluster
    finally:
        if scheduler is not None:
            stop(scheduler)
        cluster.run(None, "kafka", "stop")


def write(directory: Path, text: str) -> Path:
    path = directory / "queues.yaml"
    path.write_text(text)
    return path


def assert_refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Refused by Kafka, and the client says so in one line."""
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "not authorized: Kafka refused user" in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_each_role_may_do_its_part(secured: Secured) -> None:
    # QUOTAFLOW_TEAM (what `quotaflow kafka env producer-TEAM` sets) or --team picks the topic.
    env_team = {"QUOTAFLOW_TEAM": "team-a"}
    ok = secured.run("producer-team-a", "submit", "--queue", "team-a", "--gpu", "1", "--job", "a-1",
                     extra_env=env_team)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    own = secured.run("producer-team-b", "submit", "--team", "team-b", "--queue", "team-b",
                      "--gpu", "1", "--job", "b-1")  # fmt: skip
    assert own.returncode == 0, own.stderr
    journal = Topics.for_prefix("").journal
    wait_for(
        lambda: (
            {"a-1", "b-1"}
            <= {r.get("job") for r in secured.read(journal)[journal] if r["type"] == "JobSubmitted"}
        ),
        "both teams' jobs in the journal",
    )
    agent = secured.start("agent", "agent", "agent", "--node", "node-1", "--gpu", "8")
    try:

        def running() -> list[str]:
            seen = secured.run("reader", "jobs", "--json")
            assert seen.returncode == 0, seen.stderr
            jobs = orjson.loads(seen.stdout)["jobs"]
            return sorted(job["job"] for job in jobs if job["status"] == "running")

        assert wait_for(lambda: running() == ["a-1", "b-1"], "the agent to run both jobs")
    finally:
        stop(agent)
    audit = secured.run("reader", "replay")
    assert audit.returncode == 0, audit.stderr
    assert "every command reproduced" in audit.stdout


@pytest.mark.parametrize(
    ("user", "args", "needle"),
    [
        # a producer writes only its team's job topic
        (
            "producer-team-a",
            ("submit", "--team", "team-b", "--queue", "team-b"),
            "quotaflow.jobs.team-b",
        ),
        ("producer-team-a", ("submit", "--queue", "team-a"), "quotaflow.jobs"),
        ("producer-team-a", ("queue", "apply", "QUEUES"), "quotaflow.admin"),
        ("producer-team-a", ("jobs",), "quotaflow.journal"),
        # operators configure queues, nothing else
        ("operator", ("submit", "--team", "team-a", "--queue", "team-a"), "quotaflow.jobs.team-a"),
        # agents report nodes, never jobs or quotas
        ("agent", ("queue", "apply", "QUEUES"), "quotaflow.admin"),
        # readers read
        ("reader", ("cancel", "--team", "team-a", "a-1"), "quotaflow.jobs.team-a"),
        # only the scheduler writes the journal and commands (its topics, group and id)
        ("operator", ("scheduler",), "quotaflow."),
        # the scheduler sequences; it does not configure
        ("scheduler", ("queue", "apply", "QUEUES"), "quotaflow.admin"),
    ],
)
def test_each_role_is_refused_the_rest(
    secured: Secured, user: str, args: tuple[str, ...], needle: str
) -> None:
    argv = [str(write(secured.logs, QUEUES)) if arg == "QUEUES" else arg for arg in args]
    if argv[0] == "submit":
        argv += ["--gpu", "1"]
    assert_refused(secured.run(user, *argv), f"'{user}'", needle)


def test_a_wrong_password_is_one_clear_line(secured: Secured) -> None:
    env = secured.env("reader") | {"QUOTAFLOW_SECURITY_PASSWORD": "not-the-password"}
    result = subprocess.run(
        [*quotaflow_command(), "jobs"],
        capture_output=True,
        text=True,
        env=env,
        cwd=secured.logs,
        timeout=WAIT_S,
        check=False,
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "refused SASL_SSL as user 'reader'" in result.stderr


def test_a_cross_team_submission_is_rejected_with_a_reason(secured: Secured) -> None:
    sent = secured.run(
        "producer-team-a", "submit", "--team", "team-a", "--queue", "team-b", "--gpu", "1",
        "--job", "sneaky",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr  # Kafka lets team-a write its own topic...
    topics = Topics.for_prefix("")

    def rejection() -> dict[str, Any] | None:
        found = secured.read(topics.rejected)[topics.rejected]
        return next((r for r in found if b"sneaky" in r["input"].encode()), None)

    refused = wait_for(rejection, "the scheduler to reject the cross-team job")
    # ... and the scheduler refuses what lies outside team-a's part of the queue tree.
    assert refused["reason"] == (
        "team 'team-a' may submit only to queue 'team-a' and the queues below it, not to 'team-b'"
    )
    assert refused["topic"] == "quotaflow.jobs.team-a"
    journal = secured.read(topics.journal)[topics.journal]
    assert "sneaky" not in {r.get("job") for r in journal}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, token: str | None = None, ca_file: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=ca_file)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def test_the_api_needs_the_token_for_everything_but_health(secured: Secured) -> None:
    # Served over HTTPS with the broker's certificate (issued for 127.0.0.1 by the local CA).
    ca = secured.env(ADMIN_USER)["QUOTAFLOW_SECURITY_CA_FILE"]
    certificate = str(Path(ca).with_name("broker.pem"))
    port = free_port()
    api = secured.start(
        "reader", "projections", "projections", "--port", str(port), "--no-checkpoint",
        "--token", TOKEN, "--tls-cert", certificate,
    )  # fmt: skip
    base = f"https://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                return get(f"{base}/health", ca_file=ca)[0] == 200
            except OSError:
                return False

        wait_for(healthy, "the projections API")
        status, body = get(f"{base}/jobs", ca_file=ca)
        assert status == 401 and "bearer token" in body["error"]
        assert get(f"{base}/jobs", "wrong-token", ca)[0] == 401
        status, body = get(f"{base}/queues", TOKEN, ca)
        assert status == 200, body
        trust = {"SSL_CERT_FILE": ca}  # the CLI trusts what the system (here: the CA) trusts
        cli = secured.run(
            "reader", "queues", "--api", base, "--token", TOKEN, "--json", extra_env=trust
        )
        assert cli.returncode == 0, cli.stderr
        refused = secured.run("reader", "queues", "--api", base, extra_env=trust)
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    finally:
        stop(api)
