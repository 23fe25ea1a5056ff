"""The command check: commands read from quotaflow.commands matched against those the fold emitted (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from domain.commands import NodeCommand


@dataclass(slots=True)
class CommandCheck:
    """Counts of commands seen on one side only; both sides empty means the topic agrees."""

    derived: dict[bytes, int] = field(default_factory=dict)  # fold's commands not yet observed
    observed: dict[bytes, int] = field(default_factory=dict)  # topic's commands not yet derived
    commands_derived: int = 0
    commands_observed: int = 0

    def observe(self, raw: dict[str, Any]) -> None:
        """A command read from quotaflow.commands."""
        self.commands_observed += 1
        key = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
        if self.derived.get(key):
            _take(self.derived, key)
        else:
            self.observed[key] = self.observed.get(key, 0) + 1

    def expect(self, command: NodeCommand) -> None:
        """A command the fold emitted."""
        self.commands_derived += 1
        key = orjson.dumps(command.to_wire(), option=orjson.OPT_SORT_KEYS)
        if self.observed.get(key):
            _take(self.observed, key)
        else:
            self.derived[key] = self.derived.get(key, 0) + 1

    def unmatched(self) -> tuple[int, int]:
        """(derived but not yet seen on the topic, seen on the topic but not derived)."""
        return sum(self.derived.values()), sum(self.observed.values())


def _take(counter: dict[bytes, int], key: bytes) -> None:
    left = counter[key] - 1
    if left:
        counter[key] = left
    else:
        del counter[key]
