"""A job's process on a node: started in its own process group, output captured, stopped gracefully (I/O shell).

- A task process runs in a new session (its own process group), so one signal reaches the
  command and every child it started.
- Its stdout and stderr are pipes read by the agent and handed to a `sink` (the log
  capture, streams/agent_logs.py): the agent's own output stays one line per action.
- `stop(grace_s)` sends SIGTERM to the group, waits up to `grace_s` for every process of the
  group to be gone, then sends SIGKILL and waits again. It returns only when no process of
  the group is left (zombies waiting for a reaper do not count), so resources reported free
  really are.
- When the command ends on its own, members of its group that outlive it (something it put
  in the background) are stopped the same way before the outcome is known: a finished job
  leaves nothing running.
- The outcome is the exit code, and for a process ended by a signal 128 + the signal's
  number (the shell's convention) with the signal's name as the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CHUNK = 65536
DRAIN_S = 5.0  # how long output is still read once the process group is gone
POLL_S = 0.05

Sink = Callable[[str, bytes], None]  # (stream name, bytes read)


@dataclass(frozen=True, slots=True)
class Exit:
    """How a task process ended: its exit code and, when a signal ended it, the signal's name."""

    code: int
    reason: str | None = None

    @classmethod
    def of(cls, returncode: int) -> Exit:
        if returncode >= 0:
            return cls(returncode)
        signum = -returncode
        return cls(128 + signum, signal_name(signum))

    @property
    def succeeded(self) -> bool:
        return self.code == 0

    def describe(self) -> str:
        return f"exit {self.code}" + (f" ({self.reason})" if self.reason else "")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class TaskProcess:
    """One started process group with its output being read."""

    def __init__(self, process: asyncio.subprocess.Process, sink: Sink) -> None:
        self.process = process
        self.pid = process.pid
        self._readers = [
            asyncio.create_task(_pump(stream, name, sink))
            for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
            if stream is not None
        ]
        self.stopped_by: str | None = None  # "SIGTERM" or "SIGKILL" when stop() ended it

    @classmethod
    async def start(
        cls, argv: Sequence[str], env: Mapping[str, str], sink: Sink, cwd: Path | None = None
    ) -> TaskProcess:
        """Starts argv (no shell) in its own session; raises OSError when it cannot."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        return cls(process, sink)

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def wait(self, leftover_grace_s: float) -> Exit:
        """Waits for the command to end, stops what it left in its group, drains its output."""
        returncode = await self._exited()
        if group_alive(self.pid):
            await stop_group(self.pid, leftover_grace_s)
        await self._drain()
        return Exit.of(returncode)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM to the group, SIGKILL after `grace_s`; returns once the group is gone."""
        self.stopped_by = await stop_group(self.pid, grace_s)
        await self._exited()
        await self._drain()

    async def _exited(self) -> int:
        """The command's exit status, as soon as it is reaped. (asyncio's own wait() also
        waits for the pipes to close, which a process outside the group may hold open.)"""
        while self.process.returncode is None:
            await asyncio.sleep(POLL_S)
        return self.process.returncode

    async def _drain(self) -> None:
        # Once the group is gone nobody holds the pipes' write ends and the readers reach EOF,
        # unless a process that left the group (setsid) still does: it is not waited for.
        _, pending = await asyncio.wait(self._readers, timeout=DRAIN_S)
        for reader in pending:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        if not pending:  # the pipes are closed: let asyncio finish with the process
            await self.process.wait()


async def _pump(stream: asyncio.StreamReader, name: str, sink: Sink) -> None:
    while True:
        chunk = await stream.read(CHUNK)
        if not chunk:
            return
        sink(name, chunk)


async def stop_group(pgid: int, grace_s: float) -> str | None:
    """Stops a process group gracefully; the last signal it needed (None: it was gone already)."""
    if not group_alive(pgid):
        return None
    _signal_group(pgid, signal.SIGTERM)
    if await _gone_within(pgid, grace_s):
        return "SIGTERM"
    _signal_group(pgid, signal.SIGKILL)
    while not await _gone_within(pgid, 5.0):  # SIGKILL cannot be caught: only a wait remains
        _signal_group(pgid, signal.SIGKILL)
    return "SIGKILL"


async def _gone_within(pgid: int, seconds: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while group_alive(pgid):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not); without /proc, kill -0."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # Field 2 (the command) may hold spaces and parentheses: split after its last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            return True
    return False


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
