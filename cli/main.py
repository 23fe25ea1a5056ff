"""The `quotaflow` command line: the composition root over streams/, projections/ and devtools/ (I/O shell).

Every failure ends as one line on stderr and a non-zero exit code, never a traceback
(set QUOTAFLOW_DEBUG=1 to see one). Producers validate with the scheduler's own codec
before sending, so a mistake is reported at once; the scheduler validates again.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from cli.common import (
    BOOTSTRAP_ENV,
    DEBUG_ENV,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    FALLBACK_BOOTSTRAP,
    PREFIX_ENV,
    CliError,
    _Parser,
    _positive_int,
)
from cli.config import topic_prefix_default
from cli.security import add_kafka_security, apply_kafka_security
from streams.kafka_security import use_security


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `quotaflow`; returns the exit code."""
    # The CLI reports failures itself, in one line; the clients' own log lines (and asyncio's
    # "Unclosed ..." notes after a failed connection) would only repeat them.
    if not os.environ.get(DEBUG_ENV):
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:
        from cli import app

        app.PREPARE[:] = [apply_kafka_security]
        args = list(sys.argv[1:] if argv is None else argv)
        return app.run(build_parser(_module_of(args)), args)
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
    finally:
        use_security(None)  # a command run in-process (tests) leaves no settings behind


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

    from cli.config import ConfigError
    from devtools.kafka_home import BrokerError
    from streams.agent import AgentError
    from streams.kafka_io import TopicConfigError

    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, TopicConfigError):
        return f"scheduler: {exc}"
    if isinstance(exc, BrokerError):
        return f"broker: {exc}"
    if isinstance(exc, AgentError):
        return f"agent: {exc}"
    refusal = _refusal(exc)
    if refusal is not None:
        return refusal
    if isinstance(exc, KafkaConnectionError):
        from streams.kafka_io import current_security

        security = current_security()
        if security.protocol != "PLAINTEXT":
            # aiokafka reports a refused login or an untrusted certificate as a failed bootstrap.
            return (
                f"cannot reach Kafka, or it refused {security.protocol} as user "
                f"{security.username!r}: {exc} (check the broker, the user, the password and "
                "the CA file)"
            )
        return f"cannot reach Kafka: {exc} (is a broker running? try `quotaflow kafka start`)"
    if isinstance(exc, KafkaError):
        return f"Kafka error: {type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return f"timed out talking to Kafka ({exc or 'no answer'}); is the broker up and are the topics created?"
    return f"unexpected error: {type(exc).__name__}: {exc} (QUOTAFLOW_DEBUG=1 shows a traceback)"


def _refusal(exc: BaseException) -> str | None:
    """One line for a broker's authentication or authorization refusal, naming the user."""
    from aiokafka import errors

    from streams.kafka_io import current_security

    user = current_security().username
    who = f"user {user!r}" if user else "this client (no user)"
    detail = str(exc).rpartition(": ")[2].strip()
    refused = {
        errors.TopicAuthorizationFailedError: f"topic {detail}",
        errors.GroupAuthorizationFailedError: f"consumer group {detail}",
        errors.TransactionalIdAuthorizationFailed: "the transactional id",
        errors.ClusterAuthorizationFailedError: "the cluster (e.g. an idempotent write)",
    }
    for kind, what in refused.items():
        if isinstance(exc, kind):
            return (
                f"not authorized: Kafka refused {who} access to {what} "
                "(its role does not allow it; docs/kafka.md, Production security)"
            )
    if isinstance(exc, errors.SaslAuthenticationFailed | errors.AuthenticationFailedError):
        return f"Kafka refused to authenticate {who}: wrong user or password ({detail})"
    return None


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


# Each command and the module (cli/NAME.py) that declares it, in the order they are declared.
# A command line builds, and so imports, only its own command's module: `quotaflow simulate`
# loads no Kafka client. Anything else (no command, an option first, a mistyped command)
# builds them all. tests/projections/test_cli_commands.py holds this table to the modules.
COMMAND_MODULES = {
    "kafka": "kafka",
    "scheduler": "scheduler",
    "agent": "agent",
    "logs": "logs",
    "submit": "jobs",
    "cancel": "jobs",
    "queue": "queues",
    "cluster": "cluster",
    "simulate": "simulate",
    "replay": "audit",
    "schema": "schema",
    **dict.fromkeys(
        ("projections", "queues", "explain", "whatif", "status", "rejected", "jobs", "usage"),
        "views",
    ),
}
# What each module's `register` takes besides the subcommands: the Kafka options, and the
# topic options too.
_TAKES_KAFKA = frozenset(
    {"kafka", "scheduler", "agent", "logs", "jobs", "queues", "cluster", "audit"}
)
_TAKES_TOPICS = frozenset({"kafka", "scheduler"})


def _module_of(args: Sequence[str]) -> str | None:
    """The one module the command line needs, or None for all of them."""
    return COMMAND_MODULES.get(args[0]) if args else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command, or only those of the module `only` (see COMMAND_MODULES)."""
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
        default=topic_prefix_default(),
        help=f"prefix of every topic name, to run several clusters on one broker (default: ${PREFIX_ENV} or none)",
    )
    add_kafka_security(kafka_options)

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
    for name in dict.fromkeys(COMMAND_MODULES.values()) if only is None else (only,):
        module = importlib.import_module(f"cli.{name}")
        if name in _TAKES_TOPICS:
            module.register(commands, kafka_options, topic_options)
        elif name in _TAKES_KAFKA:
            module.register(commands, kafka_options)
        else:
            module.register(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
