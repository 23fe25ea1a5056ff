"""The node agent: heartbeats its node, runs the jobs dispatched to it, reports back (I/O shell).

Design (see docs/cli.md, "agent"):
- How commands are answered is the pure model in domain/agent.py, shared with the simulator;
  this module adds the I/O: timers, processes, Kafka.
- Commands come from quotaflow.commands, read_committed. The agent reads only the partition
  its node id hashes to (Kafka's default murmur2 partitioner, as the scheduler's producer
  uses) and ignores commands for other nodes sharing that partition. Its position is
  committed in its own consumer group `quotaflow-agent-<node>` after each command is acted
  on, so a restart does not replay old commands. On its very first start the agent begins at
  the partition's end, positioned *before* its first heartbeat, so it cannot miss a command
  meant for it.
- Everything needed to run a job travels in its Dispatch (`duration_s`, `labels`, `user`):
  the agent never reads the journal.
- Without --exec a job "runs" for its `duration_s` (forever when it has none) and then
  succeeds. With --exec the agent runs labels["command"] (shlex-split, no shell) once per
  node, in its own process group; exit code 0 means succeeded. Preempt stops it (SIGTERM,
  then SIGKILL after a grace period) before JobPreempted is reported.
- Every report carries the attempt of the Dispatch it answers.
- One agent per node: a state file per node (streams/agent_state.py) keeps a stable instance
  id, an incarnation counter and the process groups it started, under an exclusive lock. A
  restart is a new incarnation: it first kills what its previous incarnation left running,
  then heartbeats `running: []`, and the core requeues the node's jobs; Dispatches addressed
  to the previous incarnation are ignored. A second agent on the same machine fails at once;
  one elsewhere is refused by the scheduler, and the agent exits with its reason.
- When the agent itself stops it kills what it runs and reports nothing: the scheduler
  sees the node lost after heartbeat_timeout_s (or the next start's heartbeat) and requeues
  its jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2
from pydantic import ValidationError

from domain.agent import AgentModel, Reaction, Run
from domain.codec import decode_ingress
from domain.commands import Dispatch, Preempt
from domain.events import NodeHeartbeat, Strict
from streams import topics
from streams.agent_state import AgentState, NodeHeldError, hold_node
from streams.kafka_io import Topics, idempotent_producer, partitions_of, security_options

log = logging.getLogger("quotaflow.agent")

KILL_GRACE_S = 10.0
POLL_MS = 200
STATE_DIR_ENV = "QUOTAFLOW_STATE_DIR"


def default_state_dir() -> Path:
    """$QUOTAFLOW_STATE_DIR, else $XDG_STATE_HOME/quotaflow/agents, else ~/.local/state/..."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "quotaflow" / "agents"


@dataclass(frozen=True)
class AgentConfig:
    bootstrap: str
    node: str
    gpu: float = 8
    cpu: int = 64000
    memory: int = 512000
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat_s: float = 5.0
    exec_jobs: bool = False
    topic_prefix: str = ""
    kill_grace_s: float = KILL_GRACE_S
    state_dir: Path | None = None  # None: default_state_dir()

    def topic(self, name: str) -> str:
        return Topics.for_prefix(self.topic_prefix).name(name)

    @property
    def group_id(self) -> str:
        return f"{self.topic_prefix}quotaflow-agent-{self.node}"

    def heartbeat(
        self,
        instance: str | None = None,
        incarnation: int | None = None,
        running: list[tuple[str, int]] | None = None,
    ) -> NodeHeartbeat:
        """This node's heartbeat, checked by the scheduler's codec; raises DecodeError."""
        body: dict[str, Any] = {"type": "NodeHeartbeat", "node": self.node}
        if instance is not None:  # early in the object: a rejection's input prefix shows it
            body["instance"] = instance
            body["incarnation"] = incarnation
        body["capacity"] = {"gpu": self.gpu, "cpu": self.cpu, "memory": self.memory}
        body["labels"] = self.labels
        if running is not None:
            body["running"] = [{"job": job, "attempt": attempt} for job, attempt in running]
        event = decode_ingress(topics.NODES, orjson.dumps(body))
        assert isinstance(event, NodeHeartbeat)
        return event


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key` (murmur2, as the Java client)."""
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@dataclass
class _Handle:
    """The I/O side of one run: its timer or its process."""

    task: asyncio.Task[None] | None = None
    process: asyncio.subprocess.Process | None = None


class Agent:
    """One node's agent; `run(stop)` until `stop` is set."""

    def __init__(
        self,
        config: AgentConfig,
        say: Callable[[str], None] | None = None,
        state: AgentState | None = None,
    ) -> None:
        self.config = config
        self._say = say or _print
        self.state = state  # None in tests that drive commands without a state file
        self.model = AgentModel(incarnation=state.incarnation if state else None)
        self.handles: dict[int, _Handle] = {}  # run.order -> its timer or process
        self._background: set[asyncio.Task[None]] = set()
        self._producer: AIOKafkaProducer | None = None

    def say(self, message: str) -> None:
        self._say(f"{self.config.node}: {message}")

    @property
    def runs(self) -> dict[str, Run]:
        """This node's runs by job id."""
        return {job: run for (_, job), run in self.model.runs.items()}

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        config = self.config
        if self.state is None:
            raise AgentError("the agent needs its node state (hold_node) to run")
        state = self.state
        producer = idempotent_producer(config.bootstrap)
        commands = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap,
            **security_options(),
            group_id=config.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="latest",
        )
        rejected = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap,
            **security_options(),
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="latest",
        )
        async with contextlib.AsyncExitStack() as clients:
            for client in (producer, commands, rejected):
                # Registered before start(): a client that half-started is still closed.
                clients.push_async_callback(client.stop)
                await client.start()
            self._producer = producer
            clients.callback(setattr, self, "_producer", None)
            partition = await self._position_commands(commands)
            await self._position_rejected(rejected)
            await self._send(self._heartbeat())
            self.say(
                f"registered (gpu {config.gpu:g}, cpu {config.cpu}, memory {config.memory}; "
                f"commands partition {partition.partition}; instance {state.instance} "
                f"incarnation {state.incarnation})"
            )
            tasks = [
                asyncio.create_task(self._heartbeats(stop)),
                asyncio.create_task(self._read_commands(commands, partition, stop)),
                asyncio.create_task(self._watch_rejections(rejected, stop)),
                asyncio.create_task(stop.wait()),
            ]
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:  # a reader that died takes the agent down, loudly
                    error = None if finished.cancelled() else finished.exception()
                    if error is not None:
                        raise error
            finally:
                stop.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await self._stop_everything()
        self.say("stopped")

    def _heartbeat(self) -> NodeHeartbeat:
        state = self.state
        running = sorted((run.job, run.attempt) for run in self.model.runs.values())
        if state is None:
            return self.config.heartbeat(running=running)
        return self.config.heartbeat(state.instance, state.incarnation, running)

    async def _position_commands(self, consumer: AIOKafkaConsumer) -> TopicPartition:
        name = self.config.topic(topics.COMMANDS)
        partitions = await _partitions(self.config.bootstrap, name)
        partition = TopicPartition(name, partition_for(self.config.node, len(partitions)))
        consumer.assign([partition])
        committed = await consumer.committed(partition)
        if committed is None:
            # First start of this node: begin at the end, fixed now, before the first
            # heartbeat makes the scheduler aware of us.
            await consumer.seek_to_end(partition)
            position = await consumer.position(partition)
            await consumer.commit({partition: position})
        else:
            consumer.seek(partition, committed)
        return partition

    async def _position_rejected(self, consumer: AIOKafkaConsumer) -> None:
        """Rejections from now on (before the first heartbeat): a refusal of ours is seen."""
        partitions = await _partitions(self.config.bootstrap, self.config.topic(topics.REJECTED))
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for partition in partitions:  # fix the position now, not at the first fetch
            await consumer.position(partition)

    async def _stop_everything(self) -> None:
        runs = list(self.model.runs.values())
        self.model.runs.clear()
        for run in runs:
            await self._halt(run)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- loops -------------------------------------------------------------------------------

    async def _heartbeats(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.heartbeat_s)
            if not stop.is_set():
                await self._send(self._heartbeat())

    async def _read_commands(
        self, consumer: AIOKafkaConsumer, partition: TopicPartition, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            batches = await consumer.getmany(partition, timeout_ms=POLL_MS)
            for record in batches.get(partition, []):
                await self._handle(record.value)
                await consumer.commit({partition: record.offset + 1})

    async def _watch_rejections(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None:
        """Ends the agent with the scheduler's reason when it refuses one of our heartbeats."""
        state = self.state
        if state is None:
            return
        marker = f'"instance":"{state.instance}"'
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=POLL_MS)
            for records in batches.values():
                for record in records:
                    try:
                        rejection = orjson.loads(record.value or b"")
                        text, reason = str(rejection["input"]), str(rejection["reason"])
                    except (orjson.JSONDecodeError, KeyError, TypeError):
                        continue
                    ours = marker in text or f"from {state.instance}" in reason
                    if ours and "NodeHeartbeat" in text:
                        raise AgentError(f"the scheduler refused this agent's heartbeat: {reason}")

    # -- commands ----------------------------------------------------------------------------

    async def _handle(self, raw: bytes | None) -> None:
        try:
            command: dict[str, Any] = orjson.loads(raw or b"")
        except orjson.JSONDecodeError:
            return
        if not isinstance(command, dict) or command.get("node") != self.config.node:
            return
        kind = command.get("type")
        try:
            if kind == "Dispatch":
                await self._dispatch(_known(Dispatch, command))
            elif kind == "Preempt":
                self._preempt(_known(Preempt, command))
        except ValidationError as exc:
            log.warning("ignoring a %s this agent cannot read: %s", kind, exc)

    async def _dispatch(self, command: Dispatch) -> None:
        job, attempt, tasks = command.job, command.attempt, command.tasks
        reaction = self.model.dispatch(command, _now_ms())
        detail = f"dispatch {job} attempt {attempt}, {tasks} task(s), {command.reason}"
        if reaction.kind == "other_incarnation":
            self.say(
                f"{detail} -> ignored: addressed to incarnation {command.incarnation}, "
                "before this start (the scheduler requeues it)"
            )
            return
        run = reaction.run
        assert run is not None and reaction.report is not None
        if reaction.kind == "expand":
            await self._send(reaction.report)
            self.say(f"expand {job} attempt {attempt} by {tasks} task(s) -> {run.tasks}")
            return
        if reaction.displaced is not None:
            # An older attempt still here (the node was thought lost and the job requeued):
            # its reports would be stale, so stop it quietly.
            self._in_background(self._halt(reaction.displaced))
        if self.config.exec_jobs:
            await self._start_process(run, reaction, detail)
        else:
            await self._send(reaction.report)
            runs_for = "until preempted" if run.duration_s is None else f"for {run.duration_s:g}s"
            self.say(f"{detail} -> started, runs {runs_for}")
            self.handles[run.order] = _Handle(task=asyncio.create_task(self._finish_after(run)))

    async def _start_process(self, run: Run, reaction: Reaction, detail: str) -> None:
        node = self.config.node
        if not run.command:
            await self._report_finished(run, "failed", f'{detail} -> failed: no labels["command"]')
            return
        env = {
            **os.environ,
            "QUOTAFLOW_JOB": run.job,
            "QUOTAFLOW_NODE": node,
            "QUOTAFLOW_ATTEMPT": str(run.attempt),
            "QUOTAFLOW_TASKS": str(run.tasks),
        }
        try:
            argv = shlex.split(run.command)
            if not argv:
                raise ValueError("empty command")
            # Its output goes to our stderr: our stdout stays one line per action.
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=sys.stderr.fileno(),
                stderr=sys.stderr.fileno(),
                env=env,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            await self._report_finished(run, "failed", f"{detail} -> failed to start: {exc}")
            return
        handle = _Handle(process=process)
        self.handles[run.order] = handle
        if self.state is not None:  # a restart kills it if this incarnation dies first
            self.state.record_process(process.pid, run.job, run.attempt)
        assert reaction.report is not None
        await self._send(reaction.report)
        self.say(f"{detail} -> started pid {process.pid}: {run.command}")
        handle.task = asyncio.create_task(self._wait_process(run, process))

    async def _finish_after(self, run: Run) -> None:
        if run.duration_s is None:
            await asyncio.Event().wait()  # runs until preempted or the agent stops
        await asyncio.sleep(run.duration_s or 0)
        self.handles.pop(run.order, None)
        await self._report_finished(run, "succeeded", f"finished {run.job} attempt {run.attempt}")

    async def _wait_process(self, run: Run, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        self._forget_process(process)
        self.handles.pop(run.order, None)
        outcome = "succeeded" if code == 0 else "failed"
        await self._report_finished(
            run, outcome, f"finished {run.job} attempt {run.attempt}: exit {code}"
        )

    async def _report_finished(self, run: Run, outcome: str, message: str) -> None:
        report = self.model.finish(run, "succeeded" if outcome == "succeeded" else "failed")
        if report is None:  # stopped or replaced meanwhile: its Preempt answered for it
            return
        await self._send(report)
        self.say(f"{message} -> {outcome}")

    def _preempt(self, command: Preempt) -> None:
        job, attempt = command.job, command.attempt
        why = command.reason + (f", by {command.by}" if command.by else "")
        reaction = self.model.preempt(command)
        if reaction.kind == "already_finished":
            self.say(f"preempt {job} attempt {attempt} ({why}): already finished, ignored")
        elif reaction.kind == "not_running":
            # Nothing of that attempt runs here (e.g. after a restart): it is stopped, say so.
            self._in_background(self._report_preempted(reaction, why, "not running here"))
        elif reaction.kind == "shrink":  # an elastic job shrinking: the rest keeps running
            assert reaction.run is not None
            left = f"{reaction.run.tasks} left"
            self._in_background(self._report_preempted(reaction, why, left))
        else:
            assert reaction.run is not None
            self._in_background(self._halt_and_report(reaction, why))

    async def _halt_and_report(self, reaction: Reaction, why: str) -> None:
        assert reaction.run is not None
        await self._halt(reaction.run)
        await self._report_preempted(reaction, why, "stopped")

    async def _report_preempted(self, reaction: Reaction, why: str, state: str) -> None:
        report = reaction.report
        assert report is not None
        await self._send(report)
        self.say(f"preempt {report.job} attempt {report.attempt} ({why}) -> {state}, preempted")

    async def _halt(self, run: Run) -> None:
        """Stops a run: cancels its timer, or ends its process group (TERM, then KILL)."""
        handle = self.handles.pop(run.order, None)
        if handle is None:
            return
        process = handle.process
        if process is not None and process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), self.config.kill_grace_s)
            except TimeoutError:
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        if process is not None:
            self._forget_process(process)
        if handle.task is not None:
            handle.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handle.task

    def _forget_process(self, process: asyncio.subprocess.Process) -> None:
        if self.state is not None:
            self.state.forget_process(process.pid)

    def _in_background(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send(self, event: Strict) -> None:
        """Sends a report, retrying through broker outages: a lost report would strand a job.

        A retry may duplicate a report whose first send did land; the core ignores a repeated
        JobStarted, JobFinished or JobPreempted of the same attempt.
        """
        assert self._producer is not None
        value = orjson.dumps(event.model_dump(mode="json", exclude_none=True))
        delay = 0.5
        while True:
            try:
                await self._producer.send_and_wait(
                    self.config.topic(topics.NODES), value, key=self.config.node.encode()
                )
                return
            except KafkaError as exc:
                log.warning(
                    "sending %s failed (%r); retrying in %.1fs", type(event).__name__, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)


class AgentError(RuntimeError):
    """The agent cannot run (e.g. its topics do not exist); the message says what to do."""


def _known(model: type[Dispatch] | type[Preempt], command: dict[str, Any]) -> Any:
    """The command as its model, ignoring fields a newer scheduler may add."""
    return model.model_validate({k: v for k, v in command.items() if k in model.model_fields})


async def _partitions(bootstrap: str, topic: str) -> list[TopicPartition]:
    try:
        return await partitions_of(bootstrap, [topic])
    except RuntimeError:
        raise AgentError(
            f"topic {topic} does not exist on {bootstrap} "
            "(create the topics: quotaflow kafka topics, with the same --topic-prefix)"
        ) from None


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _print(message: str) -> None:
    print(message, flush=True)


async def run_agent(config: AgentConfig, stop: asyncio.Event | None = None) -> None:
    """Runs one node's agent until `stop` is set (SIGINT/SIGTERM in the CLI).

    Holds the node's state file for its whole run: a second agent for the same node on this
    machine fails at once. A previous incarnation's leftover processes are killed first.
    """
    state_dir = config.state_dir or default_state_dir()
    with contextlib.ExitStack() as held:
        try:
            state = held.enter_context(hold_node(state_dir, config.topic_prefix, config.node))
        except (NodeHeldError, OSError, RuntimeError) as exc:
            raise AgentError(str(exc)) from None
        killed = state.begin_incarnation(config.kill_grace_s)
        for line in killed:
            _print(f"{config.node}: {line}")
        await Agent(config, state=state).run(stop or asyncio.Event())
