"""The agent's runs on its node: timers for demo jobs, supervised processes with --exec (I/O shell).

The agent (streams/agent.py) decides with the pure model (domain/agent.py) what a command
means; this module does the node side of it: starting a run as a timer (`duration_s`) or,
with --exec, as a process with the job's devices in its environment and its output
captured (streams/agent_process.py, streams/agent_logs.py), and stopping it. When a run
ends on its own, `on_end(run, exit, message)` is called with how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domain.agent import Run
from streams.agent_logs import AttemptLog, LogShipper
from streams.agent_process import Exit, TaskProcess
from streams.agent_state import AgentState

OnEnd = Callable[[Run, Exit, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Launch:
    """What a Dispatch says about running its tasks here, beyond the model's Run."""

    devices: tuple[tuple[str, ...], ...] = ()  # per task, the device indices it may use
    gpu: float = 0.0  # GPUs per task (a fraction below 1 shares a device)
    grace_s: float | None = None  # the job's preempt grace period, if the Dispatch has one


@dataclass
class _Handle:
    """The I/O side of one run: its timer, or its process and output."""

    launch: Launch
    task: asyncio.Task[None] | None = None
    process: TaskProcess | None = None
    log: AttemptLog | None = None
    stopping: bool = False


def task_environment(run: Run, node: str, launch: Launch) -> dict[str, str]:
    """The QUOTAFLOW_* and CUDA_VISIBLE_DEVICES variables of a run's process."""
    env = {
        "QUOTAFLOW_JOB": run.job,
        "QUOTAFLOW_NODE": node,
        "QUOTAFLOW_ATTEMPT": str(run.attempt),
        "QUOTAFLOW_TASKS": str(run.tasks),
    }
    if launch.devices:
        # One process runs the node's tasks (a launcher such as torchrun starts one worker per
        # task): it sees the union; QUOTAFLOW_TASK_DEVICES gives each task's own, ';'-separated.
        seen: list[str] = []
        for task in launch.devices:
            seen.extend(d for d in task if d not in seen)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(seen)
        env["QUOTAFLOW_TASK_DEVICES"] = ";".join(",".join(task) for task in launch.devices)
    elif launch.gpu == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU-only job sees no GPU
    if 0 < launch.gpu < 1:
        env["QUOTAFLOW_GPU_FRACTION"] = f"{launch.gpu:g}"
    return env


class Runs:
    """Every run's timer or process on this node, keyed by the run's start order."""

    def __init__(
        self,
        node: str,
        on_end: OnEnd,
        *,
        kill_grace_s: float,
        state: AgentState | None = None,
        logs_dir: Path | None = None,
        shipper: LogShipper | None = None,
    ) -> None:
        self.node = node
        self._on_end = on_end
        self.kill_grace_s = kill_grace_s
        self._state = state
        self._logs_dir = logs_dir
        self._shipper = shipper
        self.handles: dict[int, _Handle] = {}

    def start_timer(self, run: Run, launch: Launch) -> None:
        handle = _Handle(launch)
        self.handles[run.order] = handle
        handle.task = asyncio.create_task(self._finish_after(run))

    async def start_process(self, run: Run, launch: Launch) -> str | None:
        """Starts the run's command; its pid, or None after reporting why it could not start."""
        log = AttemptLog(self._logs_dir, self._shipper, run.job, self.node, run.attempt)
        try:
            argv: Sequence[str] = shlex.split(run.command or "")
            if not argv:
                raise ValueError('no labels["command"]')
            env = {**os.environ, **task_environment(run, self.node, launch)}
            process = await TaskProcess.start(argv, env, log.write)
        except (OSError, ValueError) as exc:
            log.note(f"could not start {run.command!r}: {exc}")
            log.close(None, "not started")
            await self._on_end(run, Exit(127, "not started"), f"failed to start: {exc}")
            return None
        handle = _Handle(launch, process=process, log=log)
        self.handles[run.order] = handle
        if self._state is not None:  # a restart kills it if this incarnation dies first
            self._state.record_process(process.pid, run.job, run.attempt)
        handle.task = asyncio.create_task(self._wait_process(run, handle, process))
        return str(process.pid)

    async def _finish_after(self, run: Run) -> None:
        if run.duration_s is None:
            await asyncio.Event().wait()  # runs until preempted or the agent stops
        await asyncio.sleep(run.duration_s or 0)
        self.handles.pop(run.order, None)
        await self._on_end(run, Exit(0), f"finished {run.job} attempt {run.attempt}")

    async def _wait_process(self, run: Run, handle: _Handle, process: TaskProcess) -> None:
        ended = await process.wait(self._grace(handle))
        if handle.stopping:  # halt() owns the end of a run it stops
            return
        self.handles.pop(run.order, None)
        self._forget(process)
        if handle.log is not None:
            handle.log.close(ended.code, ended.reason)
        message = f"finished {run.job} attempt {run.attempt}: {ended.describe()}"
        await self._on_end(run, ended, message)

    async def halt(self, run: Run) -> str | None:
        """Stops a run: cancels its timer, or stops its process group (TERM, grace, KILL).
        Returns once nothing of it runs; says how it was stopped (None: nothing ran)."""
        handle = self.handles.pop(run.order, None)
        if handle is None:
            return None
        handle.stopping = True
        how = None
        process = handle.process
        if process is not None:
            grace = self._grace(handle)
            if process.running:
                await process.stop(grace)
            else:
                await process.wait(grace)
            how = process.stopped_by or "already ended"
            self._forget(process)
        if handle.task is not None:
            handle.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handle.task
        if handle.log is not None:
            returncode = process.process.returncode if process is not None else None
            ended = Exit.of(returncode) if returncode is not None else None
            handle.log.close(ended.code if ended else None, f"preempted: {how}")
        return how

    def _grace(self, handle: _Handle) -> float:
        grace = handle.launch.grace_s
        return self.kill_grace_s if grace is None else grace

    def _forget(self, process: TaskProcess) -> None:
        if self._state is not None:
            self._state.forget_process(process.pid)


@dataclass
class Background:
    """Tasks the agent started and must not lose track of (reports sent after a stop)."""

    tasks: set[asyncio.Future[object]] = field(default_factory=set)

    def start(self, coroutine: Awaitable[object]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def cancel_all(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def launch_of(command: dict[str, Any]) -> Launch:
    """The Dispatch's devices, GPUs per task and grace period (absent from older schedulers)."""
    devices = command.get("devices") or []
    per_task = tuple(
        tuple(str(d) for d in (task if isinstance(task, list) else [task])) for task in devices
    )
    resources = command.get("resources") or {}
    fraction = command.get("gpu_fraction")
    grace = command.get("preempt_grace_s")
    return Launch(
        devices=per_task,
        gpu=float(fraction if fraction is not None else resources.get("gpu", 0) or 0),
        grace_s=None if grace is None else float(grace),
    )
