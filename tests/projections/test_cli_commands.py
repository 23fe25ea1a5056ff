"""The CLI builds only the command a line names (cli/main.py, COMMAND_MODULES): the table
matches what each module declares, and `quotaflow simulate` loads no Kafka client."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from cli.main import COMMAND_MODULES, build_parser


def commands_of(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def test_each_command_is_declared_by_the_module_the_table_names() -> None:
    # Given the table, and every command the full command line has
    every = commands_of(build_parser())

    # Then the table names each command once, and each module declares exactly its own
    assert set(COMMAND_MODULES) == every
    for module in set(COMMAND_MODULES.values()):
        own = {command for command, name in COMMAND_MODULES.items() if name == module}
        assert commands_of(build_parser(module)) == own, module


def test_simulate_loads_no_kafka_client(tmp_path: Path) -> None:
    # Given an events file of one queue
    events = tmp_path / "in.jsonl"
    events.write_text(
        '{"type":"QueueConfigured","ts":0,"queue":"q","resources":{"gpu":{"quota":1}}}\n'
    )

    # When `quotaflow simulate` runs it in a fresh interpreter
    probe = (
        "import sys; from cli.main import main; "
        f"code = main(['simulate', {str(events)!r}]); "
        "print(code, 'aiokafka' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )

    # Then it succeeded without importing the Kafka client
    assert done.stdout.split() == ["0", "False"]
