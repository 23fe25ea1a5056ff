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
  node, in its own process group, with the Dispatch's devices in CUDA_VISIBLE_DEVICES; its
  output goes to files on the node and to quotaflow.logs; exit code 0 means succeeded and
  JobFinished carries the code. Preempt stops it (SIGTERM to the group, SIGKILL after the
  job's grace period) and JobPreempted is reported once no process of the group is left.
  Runs, processes and logs: streams/agent_runs.py, agent_process.py, agent_logs.py.
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
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from domain.agent import AgentModel, Outcome, Reaction, Run
from domain.commands import Dispatch, Preempt
from domain.events import JobFinished, NodeHeartbeat
from domain.wire_types import Strict
from streams import topics
from streams.agent_config import AgentConfig as AgentConfig
from streams.agent_config import default_state_dir
from streams.agent_kafka import (
    POLL_MS,
    commands_consumer,
    commit_within,
    position_commands,
    position_rejected,
    rejections_consumer,
    topic_exists,
    watch_rejections,
)
from streams.agent_kafka import AgentError as AgentError
from streams.agent_logs import LogShipper, logs_dir
from streams.agent_metrics import AgentMonitor
from streams.agent_process import Exit
from streams.agent_runs import Background, Launch, Runs, launch_of, task_environment
from streams.agent_state import AgentState, NodeHeldError, hold_node
from streams.kafka_io import idempotent_producer
from streams.metrics import serving

log = logging.getLogger("quotaflow.agent")


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
        self.shipper = LogShipper(config.topic(topics.LOGS))
        self.monitor = AgentMonitor(config.node)
        self.monitor.agent = self
        self.processes = Runs(
            config.node,
            self._ended,
            kill_grace_s=config.kill_grace_s,
            state=state,
            logs_dir=logs_dir(state.path if state else None),
            shipper=self.shipper,
        )
        self._background = Background()
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
        commands, rejected = commands_consumer(config), rejections_consumer(config)
        async with contextlib.AsyncExitStack() as clients:
            for client in (producer, commands, rejected):
                # Registered before start(): a client that half-started is still closed.
                clients.push_async_callback(client.stop)
                await client.start()
            self._producer = producer
            clients.callback(setattr, self, "_producer", None)
            partition = await position_commands(commands, config)
            await position_rejected(rejected, config)
            if not await topic_exists(config.bootstrap, self.shipper.topic):
                self.shipper.enabled = False
                self.say(
                    f"topic {self.shipper.topic} does not exist: jobs' output stays in files "
                    "on this node (create it: quotaflow kafka topics)"
                )
            await self._send(self._heartbeat())
            self.say(
                f"registered (gpu {config.gpu:g}, cpu {config.cpu}, memory {config.memory}; "
                f"commands partition {partition.partition}; instance {state.instance} "
                f"incarnation {state.incarnation})"
            )
            tasks = [
                asyncio.create_task(self._heartbeats(stop)),
                asyncio.create_task(self._read_commands(commands, partition, stop)),
                asyncio.create_task(watch_rejections(rejected, state.instance, stop)),
                asyncio.create_task(self.shipper.run(producer)),
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

    async def _stop_everything(self) -> None:
        runs = list(self.model.runs.values())
        self.model.runs.clear()
        for run in runs:
            await self.processes.halt(run)
        await self._background.cancel_all()

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
                await commit_within(consumer, partition, record.offset + 1)

    # -- commands ----------------------------------------------------------------------------

    async def _handle(self, raw: bytes | None) -> None:
        try:
            command: dict[str, Any] = orjson.loads(raw or b"")
        except orjson.JSONDecodeError:
            return
        if not isinstance(command, dict) or command.get("node") != self.config.node:
            return
        kind = command.get("type")
        self.monitor.received(str(kind))
        try:
            if kind == "Dispatch":
                await self._dispatch(_known(Dispatch, command), launch_of(command))
            elif kind == "Preempt":
                self._preempt(_known(Preempt, command))
        except ValidationError as exc:
            log.warning("ignoring a %s this agent cannot read: %s", kind, exc)

    async def _dispatch(self, command: Dispatch, launch: Launch) -> None:
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
            self._background.start(self.processes.halt(reaction.displaced))
        if self.config.exec_jobs:
            pid = await self.processes.start_process(run, launch)
            if pid is not None:
                await self._send(reaction.report)
                devices = task_environment(run, self.config.node, launch).get(
                    "CUDA_VISIBLE_DEVICES"
                )
                shown = "" if devices is None else f" (CUDA_VISIBLE_DEVICES={devices})"
                self.say(f"{detail} -> started pid {pid}{shown}: {run.command}")
        else:
            await self._send(reaction.report)
            runs_for = "until preempted" if run.duration_s is None else f"for {run.duration_s:g}s"
            self.say(f"{detail} -> started, runs {runs_for}")
            self.processes.start_timer(run, launch)

    async def _ended(self, run: Run, ended: Exit, message: str) -> None:
        """A run ended on its own (or could not start): JobFinished with how it ended."""
        outcome: Outcome = "succeeded" if ended.succeeded else "failed"
        report = self.model.finish(run, outcome)
        if report is None:  # stopped or replaced meanwhile: its Preempt answered for it
            return
        if self.config.exec_jobs:  # a process's end: its exit code and signal
            report = JobFinished(
                **{**report.model_dump(), "exit_code": ended.code, "reason": ended.reason}
            )
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
            self._background.start(self._report_preempted(reaction, why, "not running here"))
        elif reaction.kind == "shrink":  # an elastic job shrinking: the rest keeps running
            assert reaction.run is not None
            left = f"{reaction.run.tasks} left"
            self._background.start(self._report_preempted(reaction, why, left))
        else:
            assert reaction.run is not None
            self._background.start(self._halt_and_report(reaction, why))

    async def _halt_and_report(self, reaction: Reaction, why: str) -> None:
        assert reaction.run is not None
        how = await self.processes.halt(reaction.run)
        await self._report_preempted(reaction, why, "stopped", "" if how is None else f" ({how})")

    async def _report_preempted(
        self, reaction: Reaction, why: str, state: str, how: str = ""
    ) -> None:
        report = reaction.report
        assert report is not None
        await self._send(report)
        job, attempt = report.job, report.attempt
        self.say(f"preempt {job} attempt {attempt} ({why}) -> {state}, preempted{how}")

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
                self.monitor.sent(type(event).__name__)
                return
            except KafkaError as exc:
                log.warning(
                    "sending %s failed (%r); retrying in %.1fs", type(event).__name__, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)


def _known(model: type[Dispatch] | type[Preempt], command: dict[str, Any]) -> Any:
    """The command as its model, ignoring fields a newer scheduler may add."""
    return model.model_validate({k: v for k, v in command.items() if k in model.model_fields})


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


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
        agent = Agent(config, state=state)
        monitor = agent.monitor
        async with serving(
            config.metrics_host, config.metrics_port, monitor.registry, monitor.health
        ):
            await agent.run(stop or asyncio.Event())
