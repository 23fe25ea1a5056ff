"""A node agent's state file: instance id, incarnation, the processes it started; one holder (I/O shell).

`<state dir>/<topic prefix><node>.json` holds a stable `instance` id (made on the node's first
start on this machine), an `incarnation` counter bumped on every start, and the process
groups the agent started (pid and kernel start time). `<...>.lock` is held with an
exclusive `flock` for the agent's whole run, so a second agent for the same node on the same
machine fails at once with one line naming the holder's pid; the kernel drops the lock when
the holder dies, even by SIGKILL, so a restart is never blocked by a stale lock.

A restart kills the process groups its previous incarnation recorded (SIGTERM, then SIGKILL
after the grace period) before its first heartbeat, so the GPUs it reports free really are.
A recorded group is signalled only if its leader still has the recorded start time (Linux
/proc): a pid reused by an unrelated process is left alone. Without /proc nothing is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


class NodeHeldError(RuntimeError):
    """Another agent on this machine runs the same node."""


@dataclass
class AgentState:
    path: Path
    instance: str
    incarnation: int = 0
    processes: dict[int, dict[str, Any]] = field(default_factory=dict)  # pgid -> details

    @classmethod
    def load(cls, path: Path) -> AgentState:
        try:
            body = orjson.loads(path.read_bytes())
            processes = {int(p["pgid"]): p for p in body.get("processes", [])}
            return cls(path, str(body["instance"]), int(body["incarnation"]), processes)
        except FileNotFoundError:
            return cls(path, uuid.uuid4().hex)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise RuntimeError(
                f"agent state file {path} is unreadable ({exc}); move it away to start this "
                "node as a new agent instance"
            ) from None

    def save(self) -> None:
        body = {
            "instance": self.instance,
            "incarnation": self.incarnation,
            "processes": [self.processes[pgid] for pgid in sorted(self.processes)],
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
        os.replace(temporary, self.path)

    def begin_incarnation(self, kill_grace_s: float) -> list[str]:
        """A new start: kills what the previous incarnation left, bumps the counter, saves.
        Returns one line per process group it stopped."""
        lines = []
        for pgid, details in sorted(self.processes.items()):
            if _alive_as_recorded(pgid, details.get("start")):
                _stop_group(pgid, kill_grace_s)
                lines.append(
                    f"stopped process group {pgid} of {details.get('job')} attempt "
                    f"{details.get('attempt')}, left by incarnation {self.incarnation}"
                )
        self.processes.clear()
        self.incarnation += 1
        self.save()
        return lines

    def record_process(self, pid: int, job: str, attempt: int) -> None:
        self.processes[pid] = {
            "pgid": pid,
            "start": _start_time(pid),
            "job": job,
            "attempt": attempt,
        }
        self.save()

    def forget_process(self, pid: int) -> None:
        if self.processes.pop(pid, None) is not None:
            self.save()


@contextlib.contextmanager
def hold_node(state_dir: Path, topic_prefix: str, node: str) -> Iterator[AgentState]:
    """The node's state, held exclusively for the duration; NodeHeldError if another holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    stem = _UNSAFE.sub("_", f"{topic_prefix}{node}")
    lock_path = state_dir / f"{stem}.lock"
    with lock_path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise NodeHeldError(
                f"node {node} is already run by another agent on this machine (pid {holder}, "
                f"lock {lock_path}); stop that agent first, or give this one another --node"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield AgentState.load(state_dir / f"{stem}.json")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (the command) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 overall: starttime


def _alive_as_recorded(pid: int, start: int | None) -> bool:
    if start is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat[stat.rindex(")") + 2 :].split()[0]
    return state != "Z" and _start_time(pid) == start


def _stop_group(pgid: int, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether the group's leader still runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pgid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"
