"""Local single-node Kafka broker for development and tests: format, start, wait until ready, stop (developer tool, I/O).

A broker runs as ``java ... kafka.Kafka server.properties`` in its own process session;
everything it owns (``server.properties``, ``broker.log`` and the KRaft log directory) lives
in one data dir. Its jars and files: ``devtools.kafka_home``; the detached broker of
``quotaflow kafka start``: ``devtools.detached``. See ``docs/kafka.md``.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from devtools.handle import PROPERTIES_FILE, BrokerHandle
from devtools.kafka_home import (
    BrokerError,
    default_data_dir,
    ensure_jars,
    find_java,
    last_lines,
    read_text,
)
from devtools.security import SecureSetup, apply_overrides, broker_overrides, scram_format_args

JVM_OPTIONS = ("-Xms256m", "-Xmx1g", "-XX:+UseG1GC")
LOG_FILE = "broker.log"

_KRAFT_LOG_DIR = "kraft-logs"
_PLACEHOLDER = re.compile(r"\b(CPORT|PORT|DATA_DIR)\b")
_PORT_ATTEMPTS = 3

T = TypeVar("T")


class _PortTakenError(BrokerError):
    """The broker died because a port picked for it was taken in the meantime."""


# --- start ------------------------------------------------------------------------------


def start_broker(
    root: Path,
    data_dir: Path | None = None,
    port: int | None = None,
    controller_port: int | None = None,
    timeout_s: float = 90,
    secure: SecureSetup | None = None,
) -> BrokerHandle:
    """Format (if new) and start a broker, returning once it answers Kafka metadata requests.

    Ports not given are picked free on 127.0.0.1. ``data_dir`` defaults to the persistent
    ``default_data_dir(root)``; a data dir formatted earlier keeps its cluster id and topics.
    ``secure`` (``devtools.security.prepare``): TLS, SASL/SCRAM users and the authorizer.
    """
    libs = ensure_jars(root)
    java = find_java()
    data_dir = (data_dir if data_dir is not None else default_data_dir(root)).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    auto_ports = port is None and controller_port is None
    # A restarted data dir keeps its previous ports when they are free: a stable address.
    previous = _previous_ports(data_dir / PROPERTIES_FILE) if auto_ports else None
    attempts = _PORT_ATTEMPTS if auto_ports else 1
    for attempt in range(1, attempts + 1):
        if attempt == 1 and previous is not None and all(map(_port_is_free, previous)):
            broker_port, quorum_port = previous
        else:
            broker_port, quorum_port = _pick_ports(port, controller_port)
        try:
            return _launch(root, libs, java, data_dir, broker_port, quorum_port, timeout_s, secure)
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
    secure: SecureSetup | None = None,
) -> BrokerHandle:
    config_dir = root / "deploy" / "kafka"
    log4j = config_dir / "log4j2.properties"
    template = (config_dir / "server.properties.template").read_text()
    log_dir = data_dir / _KRAFT_LOG_DIR
    properties = data_dir / PROPERTIES_FILE
    text = _render_properties(template, port, controller_port, log_dir)
    if secure is not None:
        text = apply_overrides(text, broker_overrides(secure, port, controller_port))
    properties.write_text(text)
    if secure is not None:
        properties.chmod(0o600)  # it holds the broker's own SCRAM password
    scram = scram_format_args(secure) if secure is not None else []
    _format_storage(java, libs, log4j, properties, log_dir, scram)

    log_path = data_dir / LOG_FILE
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
        security_dir=secure.directory if secure is not None else None,
        _process=process,
    )
    try:
        _wait_until_ready(
            handle, process, timeout_s, secure.client_options() if secure is not None else {}
        )
    except BaseException:
        handle.stop(timeout_s=10)
        raise
    return handle


def _render_properties(template: str, port: int, controller_port: int, log_dir: Path) -> str:
    values = {"PORT": str(port), "CPORT": str(controller_port), "DATA_DIR": str(log_dir)}
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def _format_storage(
    java: str,
    libs: Path,
    log4j: Path,
    properties: Path,
    log_dir: Path,
    extra: list[str] | None = None,
) -> None:
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
        *(extra or []),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise BrokerError(
            f"formatting {log_dir} failed (exit {result.returncode}):\n"
            f"{last_lines(result.stdout + result.stderr, 30)}"
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
    text = read_text(properties)
    broker = re.search(r"^listeners=.*(?:PLAINTEXT|SASL_SSL)://[^:,\s]+:(\d+)", text, re.MULTILINE)
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
    handle: BrokerHandle,
    process: subprocess.Popen[bytes],
    timeout_s: float,
    client_options: dict[str, Any] | None = None,
) -> None:
    """Return once the broker answers a metadata request listing itself; raise on death/timeout."""
    deadline = time.monotonic() + timeout_s
    host, _, port = handle.bootstrap.rpartition(":")
    last_problem = "its port never accepted a connection"
    while True:
        code = process.poll()
        if code is not None:
            tail = last_lines(read_text(handle.log_path), 40)
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
                f"{last_lines(read_text(handle.log_path), 40)}"
            )
        if _accepts_connections(host, int(port)):
            try:
                _run_sync(
                    functools.partial(
                        _probe, handle.bootstrap, min(remaining, 10.0), client_options or {}
                    )
                )
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


async def _probe(bootstrap: str, timeout_s: float, client_options: dict[str, Any]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=max(int(timeout_s * 1000), 1000),
        **client_options,
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
