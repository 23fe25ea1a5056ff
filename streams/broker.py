"""Local single-node Kafka broker for development and tests: fetch jars with Maven, format, start, stop (I/O shell).

Apache Kafka's broker jars come from Maven Central through ``deploy/kafka/pom.xml`` and are
cached in ``<home>/.kafka/libs``, where ``<home>`` is the repository root unless the
``QUOTAFLOW_HOME`` environment variable names another directory. A broker runs as
``java ... kafka.Kafka server.properties`` in its own process session; everything it owns
(``server.properties``, ``broker.log`` and the KRaft log directory) lives in one data dir.
See ``docs/kafka.md``.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from streams.topics import TOPICS

__all__ = [
    "HOME_ENV",
    "BrokerError",
    "BrokerHandle",
    "create_topics",
    "default_data_dir",
    "ensure_broker",
    "ensure_jars",
    "kafka_dir",
    "project_root",
    "read_state",
    "start_broker",
    "state_path",
    "stop_from_state",
    "write_state",
]

HOME_ENV = "QUOTAFLOW_HOME"
MAVEN_COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"
JVM_OPTIONS = ("-Xms256m", "-Xmx1g", "-XX:+UseG1GC")

_STAMP_FILE = ".complete.json"
_STATE_FILE = "broker.json"
_PROPERTIES_FILE = "server.properties"
_LOG_FILE = "broker.log"
_KRAFT_LOG_DIR = "kraft-logs"
_PLACEHOLDER = re.compile(r"\b(CPORT|PORT|DATA_DIR)\b")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NO_ERROR = 0
_TOPIC_ALREADY_EXISTS = 36
_PORT_ATTEMPTS = 3

T = TypeVar("T")


class BrokerError(RuntimeError):
    """The local broker could not be fetched, formatted, started, reached or stopped."""


class _PortTakenError(BrokerError):
    """The broker died because a port picked for it was taken in the meantime."""


@dataclass(eq=False)
class BrokerHandle:
    """A running (or once running) local broker: its process id, address and files."""

    pid: int
    bootstrap: str
    data_dir: Path
    log_path: Path
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def is_alive(self) -> bool:
        """Whether this broker's JVM is still running."""
        if self._process is not None:
            return self._process.poll() is None
        return _is_broker_process(self.pid, self.data_dir)

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM the broker's process group; SIGKILL it if still running after ``timeout_s``."""
        if not self.is_alive():
            self._wait(0)
            return
        self._signal(signal.SIGTERM)
        if self._wait(timeout_s):
            return
        self._signal(signal.SIGKILL)
        if not self._wait(10):
            raise BrokerError(f"Kafka broker pid {self.pid} is still running after SIGKILL")

    def _signal(self, signum: signal.Signals) -> None:
        try:
            group = os.getpgid(self.pid)
            if group == self.pid and group != os.getpgrp():
                os.killpg(group, signum)
            else:
                os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def _wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the process to end (reaping it if it is our child)."""
        if self._process is not None:
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while self.is_alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True


# --- locations --------------------------------------------------------------------------


def project_root() -> Path:
    """The QuotaFlow checkout: the nearest directory above this file holding pyproject.toml."""
    here = Path(__file__).resolve().parent
    for directory in (here, *here.parents):
        if (directory / "pyproject.toml").is_file():
            return directory
    raise BrokerError(
        f"no pyproject.toml above {here}: the local broker needs a QuotaFlow checkout"
    )


def kafka_dir(root: Path) -> Path:
    """Where ``.kafka/`` lives: under ``$QUOTAFLOW_HOME`` when set, else under ``root``."""
    home = os.environ.get(HOME_ENV)
    return (Path(home).expanduser() if home else root).resolve() / ".kafka"


def default_data_dir(root: Path) -> Path:
    """The persistent data dir used when ``start_broker`` is given none."""
    return kafka_dir(root) / "data"


def state_path(root: Path) -> Path:
    """The state file describing the detached broker started by ``quotaflow kafka start``."""
    return kafka_dir(root) / _STATE_FILE


# --- jars -------------------------------------------------------------------------------


def ensure_jars(root: Path) -> Path:
    """Return the directory of broker jars, fetching them with Maven unless already cached."""
    pom = root / "deploy" / "kafka" / "pom.xml"
    if not pom.is_file():
        raise BrokerError(f"missing {pom}")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    libs = kafka_dir(root) / "libs"
    if _jars_complete(libs, digest):
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(libs.parent / "libs.lock"):
        if _jars_complete(libs, digest):  # another process fetched them while we waited
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError("Maven (mvn) is not on PATH; it is needed once to fetch Kafka's jars")
        print(
            f"quotaflow: fetching Apache Kafka broker jars with Maven into {libs} (first run only)",
            file=sys.stderr,
            flush=True,
        )
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
        try:
            command = [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                MAVEN_COPY_GOAL,
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            ]
            result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                output = _ANSI_ESCAPE.sub("", result.stdout + result.stderr)
                raise BrokerError(
                    f"Maven could not fetch Kafka's jars (exit {result.returncode}); "
                    f"last lines:\n{_last_lines(output, 30)}"
                )
            jars = sorted(path.name for path in staging.glob("*.jar"))
            if not any(name.startswith("kafka_2.13-") for name in jars):
                raise BrokerError(f"Maven succeeded but no kafka_2.13 jar is in {staging}")
            stamp = {"pom_sha256": digest, "jars": jars}
            (staging / _STAMP_FILE).write_text(json.dumps(stamp, indent=1) + "\n")
            if libs.exists():
                shutil.rmtree(libs)
            staging.rename(libs)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return libs


def _jars_complete(libs: Path, pom_digest: str) -> bool:
    try:
        stamp = json.loads((libs / _STAMP_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("pom_sha256") != pom_digest:
        return False
    jars = stamp.get("jars")
    return isinstance(jars, list) and bool(jars) and all((libs / name).is_file() for name in jars)


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- start ------------------------------------------------------------------------------


def start_broker(
    root: Path,
    data_dir: Path | None = None,
    port: int | None = None,
    controller_port: int | None = None,
    timeout_s: float = 90,
) -> BrokerHandle:
    """Format (if new) and start a broker, returning once it answers Kafka metadata requests.

    Ports not given are picked free on 127.0.0.1. ``data_dir`` defaults to the persistent
    ``default_data_dir(root)``; a data dir formatted earlier keeps its cluster id and topics.
    """
    libs = ensure_jars(root)
    java = _java()
    data_dir = (data_dir if data_dir is not None else default_data_dir(root)).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    auto_ports = port is None and controller_port is None
    # A restarted data dir keeps its previous ports when they are free: a stable address.
    previous = _previous_ports(data_dir / _PROPERTIES_FILE) if auto_ports else None
    attempts = _PORT_ATTEMPTS if auto_ports else 1
    for attempt in range(1, attempts + 1):
        if attempt == 1 and previous is not None and all(map(_port_is_free, previous)):
            broker_port, quorum_port = previous
        else:
            broker_port, quorum_port = _pick_ports(port, controller_port)
        try:
            return _launch(root, libs, java, data_dir, broker_port, quorum_port, timeout_s)
        except _PortTakenError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _launch(
    root: Path,
    libs: Path,
    java: str,
    data_dir: Path,
    port: int,
    controller_port: int,
    timeout_s: float,
) -> BrokerHandle:
    config_dir = root / "deploy" / "kafka"
    log4j = config_dir / "log4j2.properties"
    template = (config_dir / "server.properties.template").read_text()
    log_dir = data_dir / _KRAFT_LOG_DIR
    properties = data_dir / _PROPERTIES_FILE
    properties.write_text(_render_properties(template, port, controller_port, log_dir))
    _format_storage(java, libs, log4j, properties, log_dir)

    log_path = data_dir / _LOG_FILE
    command = [
        java,
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs}/*",
        "kafka.Kafka",
        str(properties),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = BrokerHandle(
        pid=process.pid,
        bootstrap=f"127.0.0.1:{port}",
        data_dir=data_dir,
        log_path=log_path,
        _process=process,
    )
    try:
        _wait_until_ready(handle, process, timeout_s)
    except BaseException:
        handle.stop(timeout_s=10)
        raise
    return handle


def _render_properties(template: str, port: int, controller_port: int, log_dir: Path) -> str:
    values = {"PORT": str(port), "CPORT": str(controller_port), "DATA_DIR": str(log_dir)}
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def _format_storage(java: str, libs: Path, log4j: Path, properties: Path, log_dir: Path) -> None:
    # --ignore-formatted still rejects a cluster id that differs from the one already on
    # disk, so a formatted dir must be "formatted" again with its own id.
    cluster_id = _existing_cluster_id(log_dir) or _new_cluster_id()
    command = [
        java,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "--cluster-id",
        cluster_id,
        "--config",
        str(properties),
        "--ignore-formatted",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise BrokerError(
            f"formatting {log_dir} failed (exit {result.returncode}):\n"
            f"{_last_lines(result.stdout + result.stderr, 30)}"
        )


def _existing_cluster_id(log_dir: Path) -> str | None:
    try:
        lines = (log_dir / "meta.properties").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id" and value.strip():
            return value.strip()
    return None


def _new_cluster_id() -> str:
    """A random Kafka Uuid: 16 random bytes, URL-safe base64 without padding, no leading '-'."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java is not on PATH (Kafka 4.0 needs Java 17 or newer)")
    return java


def _pick_ports(port: int | None, controller_port: int | None) -> tuple[int, int]:
    sockets: list[socket.socket] = []
    try:
        picked: list[int] = []
        for wanted in (port, controller_port):
            if wanted is not None:
                picked.append(wanted)
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)  # keep it bound so the second pick differs from the first
            picked.append(sock.getsockname()[1])
        return picked[0], picked[1]
    finally:
        for sock in sockets:
            sock.close()


def _previous_ports(properties: Path) -> tuple[int, int] | None:
    text = _read_text(properties)
    broker = re.search(r"^listeners=.*PLAINTEXT://[^:,\s]+:(\d+)", text, re.MULTILINE)
    controller = re.search(r"^listeners=.*CONTROLLER://[^:,\s]+:(\d+)", text, re.MULTILINE)
    if broker is None or controller is None:
        return None
    return int(broker.group(1)), int(controller.group(1))


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_until_ready(
    handle: BrokerHandle, process: subprocess.Popen[bytes], timeout_s: float
) -> None:
    """Return once the broker answers a metadata request listing itself; raise on death/timeout."""
    deadline = time.monotonic() + timeout_s
    host, _, port = handle.bootstrap.rpartition(":")
    last_problem = "its port never accepted a connection"
    while True:
        code = process.poll()
        if code is not None:
            tail = _last_lines(_read_text(handle.log_path), 40)
            error = _PortTakenError if "Address already in use" in tail else BrokerError
            raise error(
                f"Kafka broker exited with code {code} before it was ready; "
                f"last lines of {handle.log_path}:\n{tail}"
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerError(
                f"Kafka broker at {handle.bootstrap} was not ready after {timeout_s:.0f}s "
                f"({last_problem}); last lines of {handle.log_path}:\n"
                f"{_last_lines(_read_text(handle.log_path), 40)}"
            )
        if _accepts_connections(host, int(port)):
            try:
                _run_sync(functools.partial(_probe, handle.bootstrap, min(remaining, 10.0)))
                return
            except Exception as exc:
                last_problem = f"last metadata request: {exc!r}"
        time.sleep(0.2)


def _accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


async def _probe(bootstrap: str, timeout_s: float) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=max(int(timeout_s * 1000), 1000)
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout_s)
    finally:
        await admin.close()
    if not cluster.get("brokers") or cluster.get("controller_id", -1) < 0:
        raise BrokerError(f"metadata lists no live broker or controller yet: {cluster}")


def _run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, even when an event loop is running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


def _is_broker_process(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a live ``kafka.Kafka`` JVM serving ``data_dir`` (guards against pid reuse)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return False
        raw = None  # no procfs (macOS): fall back to a plain existence check
    except OSError:
        raw = None
    if raw is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    args = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    return "kafka.Kafka" in args and str(data_dir / _PROPERTIES_FILE) in args


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:]) or "(no output)"


# --- detached broker (quotaflow kafka start / stop) -------------------------------------


def write_state(root: Path, handle: BrokerHandle) -> Path:
    """Record ``handle`` in ``<home>/.kafka/broker.json`` so another process can find or stop it."""
    path = state_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "pid": handle.pid,
        "bootstrap": handle.bootstrap,
        "data_dir": str(handle.data_dir),
        "log_path": str(handle.log_path),
    }
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    temporary.replace(path)
    return path


def read_state(root: Path) -> BrokerHandle | None:
    """The broker recorded by ``write_state``, alive or not; None when there is no valid record."""
    try:
        state = json.loads(state_path(root).read_text())
        data_dir = Path(state["data_dir"])
        return BrokerHandle(
            pid=int(state["pid"]),
            bootstrap=str(state["bootstrap"]),
            data_dir=data_dir,
            log_path=Path(state.get("log_path") or data_dir / _LOG_FILE),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_broker(
    root: Path,
    data_dir: Path | None = None,
    port: int | None = None,
    controller_port: int | None = None,
    timeout_s: float = 90,
) -> BrokerHandle:
    """Return the live broker from the state file, or start one detached and record it."""
    current = read_state(root)
    if current is not None and current.is_alive():
        return current
    handle = start_broker(root, data_dir, port, controller_port, timeout_s)
    write_state(root, handle)
    return handle


def stop_from_state(root: Path, timeout_s: float = 30) -> bool:
    """Stop the broker recorded in the state file and forget it; False if none was running."""
    handle = read_state(root)
    was_running = handle is not None and handle.is_alive()
    if handle is not None and was_running:
        handle.stop(timeout_s)
    state_path(root).unlink(missing_ok=True)
    return was_running


# --- topics -----------------------------------------------------------------------------


async def create_topics(
    bootstrap: str,
    topics: Mapping[str, int] | None = None,
    *,
    timeout_s: float = 30,
) -> None:
    """Create topics (name -> partitions, replication 1) unless they exist; wait for leaders.

    Defaults to every QuotaFlow topic (``streams.topics.TOPICS``) with one partition.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    wanted = dict(topics) if topics is not None else dict.fromkeys(TOPICS, 1)
    if not wanted:
        return
    deadline = time.monotonic() + timeout_s
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=max(int(timeout_s * 1000), 1000)
    )
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1) for name, partitions in wanted.items()]
        )
        # aiokafka reports per-topic errors in the response instead of raising them.
        failures = [
            f"{entry[0]}: error {entry[1]} {entry[2] if len(entry) > 2 else ''}".rstrip()
            for entry in response.topic_errors
            if entry[1] not in (_NO_ERROR, _TOPIC_ALREADY_EXISTS)
        ]
        if failures:
            raise BrokerError("could not create topics: " + "; ".join(failures))
        await _wait_for_leaders(admin, list(wanted), deadline)
    finally:
        await admin.close()


async def _wait_for_leaders(admin: Any, names: list[str], deadline: float) -> None:
    pending = names
    while True:
        described = await admin.describe_topics(names)
        pending = [
            topic["topic"]
            for topic in described
            if topic["error_code"] != _NO_ERROR
            or not topic["partitions"]
            or any(partition["leader"] < 0 for partition in topic["partitions"])
        ]
        if not pending and len(described) == len(names):
            return
        if time.monotonic() >= deadline:
            raise BrokerError(f"topics have no leader yet: {pending or names}")
        await asyncio.sleep(0.1)
