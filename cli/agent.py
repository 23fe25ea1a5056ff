"""`quotaflow agent`: runs a node agent (I/O shell)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from cli.common import (
    EXIT_USAGE,
    CliError,
    _non_negative_float,
    _non_negative_int,
    _positive_float,
    _run_until_signalled,
    parse_pairs,
    resolve_bootstrap,
)
from domain.codec import DecodeError


def register(commands: Any, kafka_options: argparse.ArgumentParser) -> None:
    agent = commands.add_parser(
        "agent", parents=[kafka_options], help="run a node agent: heartbeats, runs dispatched jobs"
    )
    agent.add_argument("--node", required=True, help="this node's id (its key on the topics)")
    agent.add_argument(
        "--gpu",
        type=_non_negative_int,
        help="GPU devices, numbered 0..N-1 (default: what nvidia-smi lists, else 8)",
    )
    agent.add_argument("--gpu-model", help="the devices' model, e.g. a100 (with --gpu)")
    agent.add_argument(
        "--gpu-memory", type=_non_negative_int, metavar="MB", help="each device's memory in MB"
    )
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
        "--preempt-grace-s",
        type=_non_negative_float,
        default=10.0,  # streams.agent_config.KILL_GRACE_S (not imported: the CLI starts fast)
        help="with --exec: seconds between SIGTERM and SIGKILL when a job is stopped, for "
        "Dispatches that carry no preempt_grace_s (default 10)",
    )
    agent.add_argument(
        "--state-dir",
        type=Path,
        help="where the agent keeps its per-node state file and lock (default: "
        "$QUOTAFLOW_STATE_DIR, else $XDG_STATE_HOME/quotaflow/agents, else "
        "~/.local/state/quotaflow/agents)",
    )
    agent.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus /metrics and /health on this port (default: none)",
    )
    agent.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (0.0.0.0: all)"
    )
    agent.set_defaults(handler=_agent)


def _agent(args: argparse.Namespace) -> int:
    from streams.agent import AgentConfig, run_agent

    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    from streams.agent_devices import declared, detect

    detected = None if args.gpu is not None else detect()
    if detected is not None and (args.gpu_model or args.gpu_memory):
        raise CliError("agent: --gpu-model and --gpu-memory go with --gpu N", EXIT_USAGE)
    devices = detected or declared(
        8 if args.gpu is None else args.gpu, args.gpu_model, args.gpu_memory
    )
    config = AgentConfig(
        bootstrap=resolve_bootstrap(args.bootstrap),
        node=args.node,
        gpu=len(devices),
        devices=tuple(devices),
        cpu=args.cpu,
        memory=args.memory,
        labels=parse_pairs(args.label, "--label"),
        heartbeat_s=args.heartbeat_s,
        exec_jobs=args.exec_jobs,
        topic_prefix=args.topic_prefix,
        state_dir=args.state_dir,
        kill_grace_s=args.preempt_grace_s,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    try:
        config.heartbeat()  # a bad node id or label is reported before connecting
    except DecodeError as exc:
        raise CliError(f"agent: {exc}", EXIT_USAGE) from None
    return _run_until_signalled(lambda stop: run_agent(config, stop))
