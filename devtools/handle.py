"""A handle on a local broker's JVM: is it alive, stop it (developer tool, I/O)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.kafka_home import BrokerError

PROPERTIES_FILE = "server.properties"


@dataclass(eq=False)
class BrokerHandle:
    """A running (or once running) local broker: its process id, address and files."""

    pid: int
    bootstrap: str
    data_dir: Path
    log_path: Path
    security_dir: Path | None = None  # a secured broker's CA and users (devtools.security)
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
    return "kafka.Kafka" in args and str(data_dir / PROPERTIES_FILE) in args
