"""The `quotaflow` command line: broker, scheduler, agent, producers, simulator, audit (I/O shell).

Every failure ends as one line on stderr and a non-zero exit code, never a traceback
(set QUOTAFLOW_DEBUG=1 to see one). Producers validate with the scheduler's own codec
before sending, so a mistake is reported at once; the scheduler validates again.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

import orjson
import yaml

from domain.codec import DecodeError, decode_ingress, event_to_wire
from domain.events import Event
from domain.manifests import ManifestError, queue_events
from streams import topics

BOOTSTRAP_ENV = "QUOTAFLOW_BOOTSTRAP"
PREFIX_ENV = "QUOTAFLOW_TOPIC_PREFIX"
DEBUG_ENV = "QUOTAFLOW_DEBUG"
FALLBACK_BOOTSTRAP = "127.0.0.1:9092"
SEND_TIMEOUT_S = 30.0

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3  # `kafka status` when no broker runs (the LSB status convention)
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure the user can act on; its message is printed as one line."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (plus where to find help)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


# --- entry point ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `quotaflow`; returns the exit code."""
    # The CLI reports failures itself, in one line; the clients' own log lines (and asyncio's
    # "Unclosed ..." notes after a failed connection) would only repeat them.
    if not os.environ.get(DEBUG_ENV):
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:
        args = build_parser().parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
        _silence_stdout()
        return EXIT_ERROR
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        return _fail(_describe(exc), EXIT_ERROR)


def _fail(message: str, code: int) -> int:
    text = message if message.startswith("quotaflow") else f"quotaflow: {message}"
    print(_one_line(text), file=sys.stderr, flush=True)
    return code


def _one_line(text: str) -> str:
    """Multi-line messages (e.g. a broker's log tail) keep their first and last lines."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else "quotaflow: failed"
    return f"{lines[0]} ... {lines[-1][:300]}"


def _describe(exc: BaseException) -> str:
    from aiokafka.errors import KafkaConnectionError, KafkaError

    from streams.agent import AgentError
    from streams.broker import BrokerError
    from streams.kafka_io import TopicConfigError

    if isinstance(exc, TopicConfigError):
        return f"scheduler: {exc}"
    if isinstance(exc, BrokerError):
        return f"broker: {exc}"
    if isinstance(exc, AgentError):
        return f"agent: {exc}"
    if isinstance(exc, KafkaConnectionError):
        return f"cannot reach Kafka: {exc} (is a broker running? try `quotaflow kafka start`)"
    if isinstance(exc, KafkaError):
        return f"Kafka error: {type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return f"timed out talking to Kafka ({exc or 'no answer'}); is the broker up and are the topics created?"
    return f"unexpected error: {type(exc).__name__}: {exc} (QUOTAFLOW_DEBUG=1 shows a traceback)"


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


# --- parser -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="quotaflow",
        description="Event-sourced GPU cluster scheduler on Apache Kafka.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    kafka_options = _Parser(add_help=False)
    kafka_options.add_argument(
        "--bootstrap",
        help=f"Kafka bootstrap address (default: ${BOOTSTRAP_ENV}, else the broker started by "
        f"`quotaflow kafka start`, else {FALLBACK_BOOTSTRAP})",
    )
    kafka_options.add_argument(
        "--topic-prefix",
        default=os.environ.get(PREFIX_ENV, ""),
        help=f"prefix of every topic name, to run several clusters on one broker (default: ${PREFIX_ENV} or none)",
    )

    topic_options = _Parser(add_help=False)
    topic_options.add_argument(
        "--replication-factor",
        type=_positive_int,
        default=1,
        help="replicas of each topic it creates (default 1, a local broker; 3 in production)",
    )
    topic_options.add_argument(
        "--min-insync-replicas",
        type=_positive_int,
        default=1,
        help="min.insync.replicas of each topic it creates (default 1; 2 in production)",
    )
    _add_kafka(commands, kafka_options, topic_options)
    _add_scheduler(commands, kafka_options, topic_options)
    _add_agent(commands, kafka_options)
    _add_submit(commands, kafka_options)
    cancel = commands.add_parser("cancel", parents=[kafka_options], help="cancel a job")
    cancel.add_argument("job", metavar="JOB")
    cancel.set_defaults(handler=_cancel)
    _add_queue(commands, kafka_options)
    _add_cluster(commands, kafka_options)

    simulate = commands.add_parser(
        "simulate", help="fold a JSON-lines event file offline and print commands (contract §7)"
    )
    simulate.add_argument("file", metavar="FILE", help="JSON-lines events with ts, or - for stdin")
    simulate.set_defaults(handler=_simulate)

    replay = commands.add_parser(
        "replay", parents=[kafka_options], help="audit: replay the journal and compare commands"
    )
    replay.add_argument(
        "--cluster", help="audit only this cluster's journal records (default: every record)"
    )
    replay.set_defaults(handler=_replay)

    schema = commands.add_parser("schema", help="print the JSON Schema of every event and command")
    schema.set_defaults(handler=_schema)

    _register_projections(commands)
    return parser


def _register_projections(commands: Any) -> None:
    """The projections engineer's view commands (queues, jobs, explain, ...)."""
    try:
        from projections.cli import register

        register(commands)
    except Exception as exc:  # a broken view must not take simulate, submit, ... down with it
        print(f"quotaflow: warning: view commands unavailable: {exc!r}", file=sys.stderr)


def _add_kafka(
    commands: Any, kafka_options: argparse.ArgumentParser, topic_options: argparse.ArgumentParser
) -> None:
    kafka = commands.add_parser("kafka", help="run a local single-node Kafka broker (no Docker)")
    actions = kafka.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    start = actions.add_parser(
        "start",
        parents=[kafka_options],
        help="start the broker in the background (or find the running one), create the topics, "
        "print its bootstrap address",
    )
    start.add_argument("--data-dir", type=Path, help="broker data dir (default: .kafka/data)")
    start.add_argument(
        "--port", type=int, help="broker port (default: a free one, kept across restarts)"
    )
    start.add_argument("--no-topics", action="store_true", help="do not create QuotaFlow's topics")
    start.set_defaults(handler=_kafka_start)
    stop = actions.add_parser("stop", help="stop the broker started by `quotaflow kafka start`")
    stop.set_defaults(handler=_kafka_stop)
    status = actions.add_parser(
        "status", help="print the running broker's bootstrap address (exit 3 when none runs)"
    )
    status.set_defaults(handler=_kafka_status)
    create = actions.add_parser(
        "topics",
        parents=[kafka_options, topic_options],
        help="create QuotaFlow's topics with their configuration (idempotent)",
    )
    create.add_argument(
        "--command-partitions",
        type=_positive_int,
        default=1,
        help="partitions of quotaflow.commands (agents read only their own; default 1)",
    )
    create.set_defaults(handler=_kafka_topics)


def _add_scheduler(
    commands: Any, kafka_options: argparse.ArgumentParser, topic_options: argparse.ArgumentParser
) -> None:
    scheduler = commands.add_parser(
        "scheduler",
        parents=[kafka_options, topic_options],
        help="run the scheduler (the journal's only writer)",
    )
    scheduler.add_argument("--cluster", default="default", help="cluster id: the journal's key")
    scheduler.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="scheduler log level on stderr (default INFO; DEBUG adds the Kafka client's warnings)",
    )
    scheduler.set_defaults(handler=_scheduler)


def _add_agent(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    agent = commands.add_parser(
        "agent", parents=[kafka_options], help="run a node agent: heartbeats, runs dispatched jobs"
    )
    agent.add_argument("--node", required=True, help="this node's id (its key on the topics)")
    agent.add_argument("--gpu", type=_non_negative_float, default=8, help="GPU devices (default 8)")
    agent.add_argument(
        "--cpu", type=_non_negative_int, default=64000, help="millicores (default 64000)"
    )
    agent.add_argument(
        "--memory", type=_non_negative_int, default=512000, help="MB (default 512000)"
    )
    agent.add_argument("--label", action="append", default=[], metavar="K=V", help="node label")
    agent.add_argument(
        "--heartbeat-s",
        type=_positive_float,
        default=5.0,
        help="seconds between heartbeats (default 5)",
    )
    agent.add_argument(
        "--exec",
        action="store_true",
        dest="exec_jobs",
        help='run each job\'s labels["command"] as a process; its exit code decides the outcome',
    )
    agent.add_argument(
        "--state-dir",
        type=Path,
        help="where the agent keeps its per-node state file and lock (default: "
        "$QUOTAFLOW_STATE_DIR, else $XDG_STATE_HOME/quotaflow/agents, else "
        "~/.local/state/quotaflow/agents)",
    )
    agent.set_defaults(handler=_agent)


def _add_submit(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    submit = commands.add_parser(
        "submit", parents=[kafka_options], help="submit a job (flags) or jobs (-f FILE)"
    )
    submit.add_argument("-f", "--file", help="JSON or YAML JobSubmitted object(s), or - for stdin")
    submit.add_argument("--job", help="job id (default: a new UUID)")
    submit.add_argument("--queue", help="queue id (required without -f)")
    submit.add_argument("--gpu", type=_non_negative_float, help="GPUs per task (0.5 allowed)")
    submit.add_argument("--cpu", type=_non_negative_int, help="millicores per task")
    submit.add_argument("--memory", type=_non_negative_int, help="MB per task")
    submit.add_argument("--tasks", type=_positive_int, help="tasks in the gang (default 1)")
    submit.add_argument("--min-tasks", type=_positive_int, help="elastic: fewest tasks to run with")
    submit.add_argument("--priority", type=int, help="1-9 (default 5)")
    submit.add_argument("--module", help='e.g. DLC, DSW, EAS (default "DLC")')
    submit.add_argument("--interactive", action="store_true", default=None, help="interactive job")
    submit.add_argument(
        "--preemptible",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="may be preempted (default: not interactive)",
    )
    submit.add_argument(
        "--duration", type=_non_negative_float, help="run time in seconds (demo agent)"
    )
    submit.add_argument("--label", action="append", default=[], metavar="K=V", help="job label")
    submit.add_argument(
        "--selector", action="append", default=[], metavar="K=V", help="node label required"
    )
    submit.add_argument("--user", help="who submits it")
    submit.set_defaults(handler=_submit)


def _add_queue(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    queue = commands.add_parser("queue", help="configure queues")
    actions = queue.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    apply = actions.add_parser(
        "apply", parents=[kafka_options], help="create or replace the queues of a YAML file"
    )
    apply.add_argument("file", metavar="FILE", help="YAML (several documents allowed), or -")
    apply.add_argument(
        "--dry-run", action="store_true", help="print the QueueConfigured events, send nothing"
    )
    apply.set_defaults(handler=_queue_apply)
    delete = actions.add_parser("delete", parents=[kafka_options], help="delete a queue")
    delete.add_argument("queue", metavar="QUEUE")
    delete.set_defaults(handler=_queue_delete)


def _add_cluster(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    cluster = commands.add_parser("cluster", help="cluster-wide settings")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    configure = actions.add_parser(
        "configure",
        parents=[kafka_options],
        help="send ClusterConfigured (settings not given take the contract's defaults)",
    )
    configure.add_argument("--cluster", default="default", help="cluster id (the message key)")
    configure.add_argument("--heartbeat-timeout-s", type=_positive_int, help="default 30")
    configure.add_argument("--placement", choices=["binpack", "spread"], help="default binpack")
    configure.add_argument(
        "--consolidation", action=argparse.BooleanOptionalAction, default=None, help="default on"
    )
    configure.add_argument("--tick-ms", type=_positive_int, help="default 1000")
    configure.set_defaults(handler=_cluster_configure)


# --- argument types ---------------------------------------------------------------------


def _number(text: str, cast: Callable[[str], Any], what: str, ok: Callable[[Any], bool]) -> Any:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def _positive_int(text: str) -> int:
    return int(_number(text, int, "a whole number >= 1", lambda v: v >= 1))


def _non_negative_int(text: str) -> int:
    return int(_number(text, int, "a whole number >= 0", lambda v: v >= 0))


def _non_negative_float(text: str) -> float:
    return float(
        _number(text, float, "a number >= 0", lambda v: v >= 0 and v == v and v != float("inf"))
    )


def _positive_float(text: str) -> float:
    return float(_number(text, float, "a number > 0", lambda v: v > 0 and v != float("inf")))


def parse_pairs(pairs: Iterable[str], flag: str) -> dict[str, str]:
    """`k=v` flags to a dict; a later key wins."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} {pair!r}: expected KEY=VALUE", EXIT_USAGE)
        result[key.strip()] = value
    return result


# --- addresses --------------------------------------------------------------------------


def resolve_bootstrap(explicit: str | None) -> str:
    """--bootstrap, else $QUOTAFLOW_BOOTSTRAP, else the running `kafka start` broker, else the default."""
    if explicit:
        return explicit
    from_env = os.environ.get(BOOTSTRAP_ENV)
    if from_env:
        return from_env
    from streams.broker import BrokerError, project_root, read_state

    try:
        handle = read_state(project_root())
    except BrokerError:  # installed without a checkout (e.g. in a container): no local broker
        handle = None
    if handle is not None and handle.is_alive():
        return handle.bootstrap
    return FALLBACK_BOOTSTRAP


def topic_name(prefix: str, name: str) -> str:
    """The real topic name under a prefix (the same rule as streams.kafka_io.Topics)."""
    from streams.kafka_io import Topics

    return Topics.for_prefix(prefix).name(name)


# --- kafka ------------------------------------------------------------------------------


def _root() -> Path:
    from streams.broker import project_root

    return project_root()


def _kafka_start(args: argparse.Namespace) -> int:
    from streams.broker import ensure_broker, read_state
    from streams.kafka_io import Topics, ensure_topics

    root = _root()
    before = read_state(root)
    running = before is not None and before.is_alive()
    handle = ensure_broker(root, data_dir=args.data_dir, port=args.port)
    if running:
        print(f"quotaflow: broker already running (pid {handle.pid})", file=sys.stderr)
    else:
        print(
            f"quotaflow: broker started (pid {handle.pid}, log {handle.log_path})", file=sys.stderr
        )
    if not args.no_topics:
        asyncio.run(ensure_topics(handle.bootstrap, Topics.for_prefix(args.topic_prefix)))
    print(handle.bootstrap, flush=True)
    return 0


def _kafka_stop(args: argparse.Namespace) -> int:
    from streams.broker import read_state, stop_from_state

    root = _root()
    handle = read_state(root)
    if stop_from_state(root):
        print(f"stopped the broker at {handle.bootstrap if handle else '?'}")
    else:
        print("no broker was running")
    return 0


def _kafka_status(args: argparse.Namespace) -> int:
    from streams.broker import read_state

    handle = read_state(_root())
    if handle is None or not handle.is_alive():
        print("not running")
        return EXIT_NOT_RUNNING
    print(handle.bootstrap)
    return 0


def _kafka_topics(args: argparse.Namespace) -> int:
    from streams.kafka_io import Topics, ensure_topics

    bootstrap = resolve_bootstrap(args.bootstrap)
    settings = _topic_settings(args, command_partitions=args.command_partitions)
    names = Topics.for_prefix(args.topic_prefix)
    asyncio.run(ensure_topics(bootstrap, names, settings))
    for logical in topics.TOPICS:
        partitions = settings.partitions(logical)
        config = settings.config(logical)
        print(
            f"{names.name(logical)} ({partitions} partition{'s' if partitions > 1 else ''}; "
            f"cleanup.policy={config['cleanup.policy']}, retention.ms={config['retention.ms']})"
        )
    return 0


def _topic_settings(args: argparse.Namespace, command_partitions: int = 1) -> Any:
    from streams.kafka_io import TopicSettings

    if args.min_insync_replicas > args.replication_factor:
        raise CliError(
            f"--min-insync-replicas {args.min_insync_replicas} exceeds --replication-factor "
            f"{args.replication_factor}: no write could ever succeed",
            EXIT_USAGE,
        )
    return TopicSettings(
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        command_partitions=command_partitions,
    )


# --- long-running processes -------------------------------------------------------------


def _run_until_signalled(factory: Callable[[asyncio.Event], Any]) -> int:
    """Runs a service coroutine until SIGINT/SIGTERM, which ask it to stop cleanly."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await factory(stop)

    asyncio.run(runner())
    return 0


def _scheduler(args: argparse.Namespace) -> int:
    from streams.sequencer import run_scheduler

    bootstrap = resolve_bootstrap(args.bootstrap)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.log_level == "DEBUG":  # the Kafka client's retries and reconnects, when asked for
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    settings = _topic_settings(args)
    print(f"scheduler: cluster {args.cluster} on {bootstrap}", flush=True)
    return _run_until_signalled(
        lambda stop: run_scheduler(
            bootstrap,
            cluster=args.cluster,
            topic_prefix=args.topic_prefix,
            stop=stop,
            topic_settings=settings,
        )
    )


def _agent(args: argparse.Namespace) -> int:
    from streams.agent import AgentConfig, run_agent

    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    config = AgentConfig(
        bootstrap=resolve_bootstrap(args.bootstrap),
        node=args.node,
        gpu=args.gpu,
        cpu=args.cpu,
        memory=args.memory,
        labels=parse_pairs(args.label, "--label"),
        heartbeat_s=args.heartbeat_s,
        exec_jobs=args.exec_jobs,
        topic_prefix=args.topic_prefix,
        state_dir=args.state_dir,
    )
    try:
        config.heartbeat()  # a bad node id or label is reported before connecting
    except DecodeError as exc:
        raise CliError(f"agent: {exc}", EXIT_USAGE) from None
    return _run_until_signalled(lambda stop: run_agent(config, stop))


# --- producers --------------------------------------------------------------------------


def validate(topic: str, body: dict[str, Any]) -> Event:
    """The scheduler's own decoding, run locally so a mistake is reported before sending."""
    return decode_ingress(topic, orjson.dumps(body))


async def _send(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=int(SEND_TIMEOUT_S * 1000),
    )
    try:
        await asyncio.wait_for(producer.start(), SEND_TIMEOUT_S)
        partitions = await asyncio.wait_for(producer.partitions_for(topic), SEND_TIMEOUT_S)
        if not partitions:
            raise CliError(
                f"topic {topic} does not exist on {bootstrap} (create it: quotaflow kafka topics)"
            )
        for key, value in messages:
            await asyncio.wait_for(
                producer.send_and_wait(topic, value, key=key.encode()), SEND_TIMEOUT_S
            )
    except TimeoutError:
        raise CliError(
            f"no answer from Kafka at {bootstrap} about topic {topic} within {SEND_TIMEOUT_S:.0f}s "
            "(does the topic exist? quotaflow kafka topics creates it)"
        ) from None
    finally:
        await producer.stop()


def _produce(args: argparse.Namespace, topic: str, messages: list[tuple[str, bytes]]) -> None:
    asyncio.run(
        _send(resolve_bootstrap(args.bootstrap), topic_name(args.topic_prefix, topic), messages)
    )


def _submit(args: argparse.Namespace) -> int:
    if args.file is not None:
        given = [
            flag
            for flag in (
                "job",
                "queue",
                "gpu",
                "cpu",
                "memory",
                "tasks",
                "min_tasks",
                "priority",
                "module",
                "interactive",
                "preemptible",
                "duration",
                "user",
            )
            if getattr(args, flag) is not None
        ]
        if given or args.label or args.selector:
            names = (
                ", ".join(f"--{flag.replace('_', '-')}" for flag in given) or "--label/--selector"
            )
            raise CliError(f"submit: -f FILE cannot be combined with {names}", EXIT_USAGE)
        located = [
            (f"{args.file} {where}", _job_body(item, where))
            for where, item in _load_documents(args.file)
        ]
    else:
        body = _job_from_flags(args)
        located = [(f"job {body['job']}", body)]
    bodies = []
    for where, body in located:
        try:
            validate(topics.JOBS, body)
        except DecodeError as exc:
            raise CliError(f"submit: {where}: {exc}", EXIT_USAGE) from None
        bodies.append(body)
    if not bodies:
        raise CliError(f"submit: {args.file} holds no jobs", EXIT_USAGE)
    _produce(args, topics.JOBS, [(str(body["job"]), orjson.dumps(body)) for body in bodies])
    for body in bodies:
        print(f"submitted {body['job']} to queue {body.get('queue')}")
    return 0


def _job_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    if not args.queue:
        raise CliError("submit: --queue is required (or give -f FILE)", EXIT_USAGE)
    body: dict[str, Any] = {
        "type": "JobSubmitted",
        "job": args.job or str(uuid.uuid4()),
        "queue": args.queue,
    }
    resources = {
        name: getattr(args, name)
        for name in ("gpu", "cpu", "memory")
        if getattr(args, name) is not None
    }
    if resources:
        body["resources"] = resources
    for flag, field in (
        ("tasks", "tasks"),
        ("min_tasks", "min_tasks"),
        ("priority", "priority"),
        ("module", "module"),
        ("interactive", "interactive"),
        ("preemptible", "preemptible"),
        ("duration", "duration_s"),
        ("user", "user"),
    ):
        value = getattr(args, flag)
        if value is not None:
            body[field] = value
    if args.label:
        body["labels"] = parse_pairs(args.label, "--label")
    if args.selector:
        body["node_selector"] = parse_pairs(args.selector, "--selector")
    return body


def _job_body(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise CliError(f"submit: {where}: expected a JobSubmitted object", EXIT_USAGE)
    body = {"type": "JobSubmitted", **item}
    if "job" not in item:
        body["job"] = str(uuid.uuid4())
    return body


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", EXIT_USAGE) from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a file", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text", EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE) from None


def load_yaml_documents(path: str) -> list[Any]:
    """Every YAML document of a file (JSON is YAML too); a syntax error names its line."""
    text = _read_source(path)
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise CliError(f"{path}: not valid YAML{where}: {problem}", EXIT_USAGE) from None


def _load_documents(path: str) -> Iterator[tuple[str, Any]]:
    """Objects of a JSON/YAML file: each document, and each item of a document that is a list."""
    for number, document in enumerate(load_yaml_documents(path), start=1):
        if document is None:
            continue
        items = document if isinstance(document, list) else [document]
        for index, item in enumerate(items, start=1):
            where = f"document {number}" + (f" item {index}" if isinstance(document, list) else "")
            yield where, item


def _send_one(
    args: argparse.Namespace, what: str, topic: str, key: str, body: dict[str, Any]
) -> None:
    """Validates one event with the scheduler's codec, then produces it."""
    try:
        validate(topic, body)
    except DecodeError as exc:
        raise CliError(f"{what}: {exc}", EXIT_USAGE) from None
    _produce(args, topic, [(key, orjson.dumps(body))])


def _cancel(args: argparse.Namespace) -> int:
    _send_one(args, "cancel", topics.JOBS, args.job, {"type": "JobCancelled", "job": args.job})
    print(f"cancel requested for {args.job}")
    return 0


def _queue_apply(args: argparse.Namespace) -> int:
    documents = load_yaml_documents(args.file)
    try:
        events = queue_events(documents)
    except ManifestError as exc:
        raise CliError(f"{args.file}: {exc}", EXIT_USAGE) from None
    except (AttributeError, TypeError) as exc:  # a document of the wrong shape entirely
        raise CliError(f"{args.file}: not a queue manifest ({exc})", EXIT_USAGE) from None
    if not events:
        raise CliError(f"{args.file}: holds no queues", EXIT_USAGE)
    messages = []
    for event in events:
        body = event_to_wire(event)
        try:
            validate(topics.ADMIN, body)
        except DecodeError as exc:
            raise CliError(f"{args.file}: queue {event.queue}: {exc}", EXIT_USAGE) from None
        messages.append((event.queue, orjson.dumps(body)))
    if args.dry_run:
        for _, value in messages:
            sys.stdout.buffer.write(value + b"\n")
        return 0
    _produce(args, topics.ADMIN, messages)
    for event in events:
        parent = f" (parent {event.parent})" if event.parent else ""
        print(f"applied queue {event.queue}{parent}")
    return 0


def _queue_delete(args: argparse.Namespace) -> int:
    body = {"type": "QueueDeleted", "queue": args.queue}
    _send_one(args, "queue delete", topics.ADMIN, args.queue, body)
    print(f"delete requested for queue {args.queue}")
    return 0


def _cluster_configure(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"type": "ClusterConfigured"}
    for field in ("heartbeat_timeout_s", "placement", "consolidation", "tick_ms"):
        value = getattr(args, field)
        if value is not None:
            body[field] = value
    try:
        event = validate(topics.ADMIN, body)
    except DecodeError as exc:
        raise CliError(f"cluster configure: {exc}", EXIT_USAGE) from None
    # ClusterConfigured replaces the whole configuration: send it explicit, defaults included.
    _produce(args, topics.ADMIN, [(args.cluster, orjson.dumps(event_to_wire(event)))])
    print(
        "configured "
        + " ".join(
            f"{key}={orjson.dumps(value).decode()}"
            for key, value in event_to_wire(event).items()
            if key != "type"
        )
    )
    return 0


# --- offline ------------------------------------------------------------------------------


def _bounded_lines(source: IO[bytes], limit: int) -> Iterator[bytes]:
    """Each line, but at most its first `limit` + 1 bytes: a longer line (refused anyway) is
    read on and dropped, so one huge line cannot take the memory of the process."""
    while line := source.readline(limit + 1):
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := source.readline(1 << 16)) and not rest.endswith(b"\n"):
                pass
        yield line


def _simulate(args: argparse.Namespace) -> int:
    from domain.limits import LINE_BYTES_MAX
    from domain.simulation import simulate_lines

    source: IO[bytes]
    if args.file == "-":
        source = sys.stdin.buffer
    else:
        try:
            source = Path(args.file).open("rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise CliError(f"simulate: {args.file}: no such file", EXIT_USAGE) from None
        except OSError as exc:
            raise CliError(
                f"simulate: {args.file}: cannot read: {exc.strerror or exc}", EXIT_USAGE
            ) from None
    out = sys.stdout.buffer
    try:
        for line in simulate_lines(_bounded_lines(source, LINE_BYTES_MAX)):
            out.write(line + b"\n")
        out.flush()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    return 0


def _replay(args: argparse.Namespace) -> int:
    from streams.replay import replay

    bootstrap = resolve_bootstrap(args.bootstrap)
    report = asyncio.run(replay(bootstrap, topic_prefix=args.topic_prefix, cluster=args.cluster))
    print(report.summary())
    return 0 if report.ok else EXIT_ERROR


def _schema(args: argparse.Namespace) -> int:
    from domain.schema import json_schema

    sys.stdout.buffer.write(orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
