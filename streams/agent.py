"""The node agent: heartbeats its node, runs the jobs dispatched to it, reports back (I/O shell).

Design (see docs/cli.md, "agent"):
- Commands come from quotaflow.commands, read_committed. The agent reads only the partition
  its node id hashes to (Kafka's default murmur2 partitioner, as the scheduler's producer
  uses) and ignores commands for other nodes sharing that partition. Its position is
  committed in its own consumer group `quotaflow-agent-<node>` after each command is acted
  on, so a restart does not replay old commands. On its very first start the agent begins at
  the partition's end, positioned *before* its first heartbeat, so it cannot miss a command
  meant for it.
- A Dispatch carries no run time or command line; the job's JobSubmitted does. The agent
  therefore also reads quotaflow.journal from the beginning (no group, read_committed) and
  keeps job -> (duration_s, labels["command"]). A Dispatch names the journal position that
  caused it (`seq`), so the agent waits until its journal reader has reached that seq: the
  scheduler writes both in one transaction, so it never waits long.
- Without --exec a job "runs" for its `duration_s` (forever when it has none) and then
  succeeds. With --exec the agent runs labels["command"] (shlex-split, no shell) once per
  node, in its own process group; exit code 0 means succeeded. Preempt stops it (SIGTERM,
  then SIGKILL after a grace period) before JobPreempted is reported.
- Every report carries the attempt of the Dispatch it answers.
- When the agent itself stops it kills what it runs and reports nothing: the scheduler
  sees the node lost after heartbeat_timeout_s and requeues its jobs.
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
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from domain.codec import DecodeError, decode_ingress, decode_journal
from domain.events import (
    JobFinished,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeHeartbeat,
    Strict,
)
from streams import topics
from streams.kafka_io import Topics, idempotent_producer, partitions_of

log = logging.getLogger("quotaflow.agent")

JOURNAL_WAIT_S = 30.0  # how long a Dispatch waits for the journal to show its job
KILL_GRACE_S = 10.0
POLL_MS = 200


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

    def topic(self, name: str) -> str:
        return Topics.for_prefix(self.topic_prefix).name(name)

    @property
    def group_id(self) -> str:
        return f"{self.topic_prefix}quotaflow-agent-{self.node}"

    def heartbeat(self) -> NodeHeartbeat:
        """This node's heartbeat, checked by the scheduler's codec; raises DecodeError."""
        body = {
            "type": "NodeHeartbeat",
            "node": self.node,
            "capacity": {"gpu": self.gpu, "cpu": self.cpu, "memory": self.memory},
            "labels": self.labels,
        }
        event = decode_ingress(topics.NODES, orjson.dumps(body))
        assert isinstance(event, NodeHeartbeat)
        return event


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key` (murmur2, as the Java client)."""
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@dataclass
class _JobSpec:
    duration_s: float | None
    command: str | None


@dataclass
class _Run:
    job: str
    attempt: int
    tasks: int
    task: asyncio.Task[None] | None = None
    process: asyncio.subprocess.Process | None = None


class Agent:
    """One node's agent; `run(stop)` until `stop` is set."""

    def __init__(self, config: AgentConfig, say: Callable[[str], None] | None = None) -> None:
        self.config = config
        self._say = say or _print
        self.specs: dict[str, _JobSpec] = {}
        self.journal_seq = 0
        self._journal_moved = asyncio.Condition()
        self.runs: dict[str, _Run] = {}
        self._finished: set[tuple[str, int]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._producer: AIOKafkaProducer | None = None

    def say(self, message: str) -> None:
        self._say(f"{self.config.node}: {message}")

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        config = self.config
        heartbeat = config.heartbeat()
        producer = idempotent_producer(config.bootstrap)
        commands = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap,
            group_id=config.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="latest",
        )
        journal = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        async with contextlib.AsyncExitStack() as clients:
            for client in (producer, commands, journal):
                # Registered before start(): a client that half-started is still closed.
                clients.push_async_callback(client.stop)
                await client.start()
            self._producer = producer
            clients.callback(setattr, self, "_producer", None)
            partition = await self._position_commands(commands)
            await self._assign_journal(journal)
            await self._send(heartbeat)
            self.say(
                f"registered (gpu {config.gpu:g}, cpu {config.cpu}, memory {config.memory}; "
                f"commands partition {partition.partition})"
            )
            tasks = [
                asyncio.create_task(self._heartbeats(heartbeat, stop)),
                asyncio.create_task(self._read_journal(journal, stop)),
                asyncio.create_task(self._read_commands(commands, partition, stop)),
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

    async def _assign_journal(self, consumer: AIOKafkaConsumer) -> None:
        partitions = await _partitions(self.config.bootstrap, self.config.topic(topics.JOURNAL))
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)

    async def _stop_everything(self) -> None:
        runs = list(self.runs.values())
        self.runs.clear()
        for run in runs:
            await self._halt(run)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- loops -------------------------------------------------------------------------------

    async def _heartbeats(self, heartbeat: NodeHeartbeat, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.heartbeat_s)
            if not stop.is_set():
                await self._send(heartbeat)

    async def _read_journal(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=POLL_MS)
            moved = False
            for records in batches.values():
                for record in records:
                    moved = True
                    self._learn(record.value)
            if moved:
                async with self._journal_moved:
                    self._journal_moved.notify_all()

    def _learn(self, raw: bytes | None) -> None:
        if raw is None:
            return
        try:
            entry = decode_journal(raw)
        except (DecodeError, ValueError):
            return  # a record from a newer version: nothing this agent can run from it
        self.journal_seq = max(self.journal_seq, entry.seq)
        event = entry.event
        # Kept for good (a few bytes per job): a job's Dispatch may be read after the journal
        # has moved past its cancellation or end, and must still find its spec.
        if isinstance(event, JobSubmitted):
            command = (event.labels or {}).get("command")
            self.specs[event.job] = _JobSpec(event.duration_s, command)

    async def _read_commands(
        self, consumer: AIOKafkaConsumer, partition: TopicPartition, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            batches = await consumer.getmany(partition, timeout_ms=POLL_MS)
            for record in batches.get(partition, []):
                await self._handle(record.value)
                await consumer.commit({partition: record.offset + 1})

    # -- commands ----------------------------------------------------------------------------

    async def _handle(self, raw: bytes | None) -> None:
        try:
            command: dict[str, Any] = orjson.loads(raw or b"")
        except orjson.JSONDecodeError:
            return
        if not isinstance(command, dict) or command.get("node") != self.config.node:
            return
        kind = command.get("type")
        if kind == "Dispatch":
            await self._dispatch(command)
        elif kind == "Preempt":
            self._preempt(command)

    async def _dispatch(self, command: dict[str, Any]) -> None:
        job, attempt, tasks = str(command["job"]), int(command["attempt"]), int(command["tasks"])
        current = self.runs.get(job)
        if current is not None and current.attempt == attempt:
            current.tasks += tasks  # an elastic job expanding on this node
            await self._send(JobStarted(job=job, node=self.config.node, attempt=attempt))
            self.say(f"expand {job} attempt {attempt} by {tasks} task(s) -> {current.tasks}")
            return
        if current is not None:
            # An older attempt still here (the node was thought lost and the job requeued):
            # its reports would be stale, so stop it quietly.
            del self.runs[job]
            self._in_background(self._halt(current))
        spec = await self._spec(job, int(command.get("seq", 0)))
        run = _Run(job, attempt, tasks)
        self.runs[job] = run
        detail = f"dispatch {job} attempt {attempt}, {tasks} task(s), {command.get('reason')}"
        if self.config.exec_jobs:
            await self._start_process(run, spec, detail)
        else:
            await self._send(JobStarted(job=job, node=self.config.node, attempt=attempt))
            runs_for = "until preempted" if spec.duration_s is None else f"for {spec.duration_s:g}s"
            self.say(f"{detail} -> started, runs {runs_for}")
            run.task = asyncio.create_task(self._finish_after(run, spec.duration_s))

    async def _spec(self, job: str, seq: int) -> _JobSpec:
        """The job's run time and command, once the journal reader has reached `seq`."""
        async with self._journal_moved:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._journal_moved.wait_for(
                        lambda: job in self.specs or self.journal_seq >= seq
                    ),
                    JOURNAL_WAIT_S,
                )
        spec = self.specs.get(job)
        if spec is None:
            self.say(f"warning: {job} not found in the journal; running it without a duration")
            return _JobSpec(None, None)
        return spec

    async def _start_process(self, run: _Run, spec: _JobSpec, detail: str) -> None:
        node = self.config.node
        if not spec.command:
            del self.runs[run.job]
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
            argv = shlex.split(spec.command)
            if not argv:
                raise ValueError("empty command")
            # Its output goes to our stderr: our stdout stays one line per action.
            run.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=sys.stderr.fileno(),
                stderr=sys.stderr.fileno(),
                env=env,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            del self.runs[run.job]
            await self._report_finished(run, "failed", f"{detail} -> failed to start: {exc}")
            return
        await self._send(JobStarted(job=run.job, node=node, attempt=run.attempt))
        self.say(f"{detail} -> started pid {run.process.pid}: {spec.command}")
        run.task = asyncio.create_task(self._wait_process(run))

    async def _finish_after(self, run: _Run, duration_s: float | None) -> None:
        if duration_s is None:
            await asyncio.Event().wait()  # runs until preempted or the agent stops
        await asyncio.sleep(duration_s or 0)
        if self.runs.get(run.job) is run:
            del self.runs[run.job]
            await self._report_finished(
                run, "succeeded", f"finished {run.job} attempt {run.attempt}"
            )

    async def _wait_process(self, run: _Run) -> None:
        assert run.process is not None
        code = await run.process.wait()
        if self.runs.get(run.job) is run:  # not preempted meanwhile
            del self.runs[run.job]
            outcome = "succeeded" if code == 0 else "failed"
            await self._report_finished(
                run, outcome, f"finished {run.job} attempt {run.attempt}: exit {code}"
            )

    async def _report_finished(self, run: _Run, outcome: str, message: str) -> None:
        self._finished.add((run.job, run.attempt))
        event = JobFinished(
            job=run.job,
            node=self.config.node,
            attempt=run.attempt,
            outcome=outcome,  # type: ignore[arg-type]
        )
        await self._send(event)
        self.say(f"{message} -> {outcome}")

    def _preempt(self, command: dict[str, Any]) -> None:
        job, attempt, tasks = str(command["job"]), int(command["attempt"]), int(command["tasks"])
        why = f"{command.get('reason')}" + (f", by {command['by']}" if command.get("by") else "")
        run = self.runs.get(job)
        if run is None or run.attempt != attempt:
            if (job, attempt) in self._finished:
                self.say(f"preempt {job} attempt {attempt} ({why}): already finished, ignored")
                return
            # Nothing of that attempt runs here (e.g. after a restart): it is stopped, say so.
            self._in_background(self._report_preempted(job, attempt, why, "not running here"))
            return
        run.tasks -= tasks
        if run.tasks > 0:  # an elastic job shrinking: the rest keeps running
            self._in_background(self._report_preempted(job, attempt, why, f"{run.tasks} left"))
            return
        del self.runs[job]
        self._in_background(self._halt_and_report(run, why))

    async def _halt_and_report(self, run: _Run, why: str) -> None:
        await self._halt(run)
        await self._report_preempted(run.job, run.attempt, why, "stopped")

    async def _report_preempted(self, job: str, attempt: int, why: str, state: str) -> None:
        await self._send(JobPreempted(job=job, node=self.config.node, attempt=attempt))
        self.say(f"preempt {job} attempt {attempt} ({why}) -> {state}, preempted")

    async def _halt(self, run: _Run) -> None:
        """Stops a run: cancels its timer, or ends its process group (TERM, then KILL)."""
        process = run.process
        if process is not None and process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), self.config.kill_grace_s)
            except TimeoutError:
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        if run.task is not None:
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run.task

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


async def _partitions(bootstrap: str, topic: str) -> list[TopicPartition]:
    try:
        return await partitions_of(bootstrap, [topic])
    except RuntimeError:
        raise AgentError(
            f"topic {topic} does not exist on {bootstrap} "
            "(create the topics: quotaflow kafka topics, with the same --topic-prefix)"
        ) from None


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _print(message: str) -> None:
    print(message, flush=True)


async def run_agent(config: AgentConfig, stop: asyncio.Event | None = None) -> None:
    """Runs one node's agent until `stop` is set (SIGINT/SIGTERM in the CLI)."""
    await Agent(config).run(stop or asyncio.Event())
