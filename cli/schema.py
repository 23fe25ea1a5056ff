"""`quotaflow schema`: the JSON Schema of every event and command (I/O shell)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson


def register(commands: Any) -> None:
    schema = commands.add_parser("schema", help="print the JSON Schema of every event and command")
    schema.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from domain.schema import json_schema

    sys.stdout.buffer.write(orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    return 0
