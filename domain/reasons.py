"""Structured reasons: why a job waits, as a kind, the facts behind it and a sentence (pure).

The core decides the kind where it knows it (a quota check, a capacity search, a
preemption under way); views, explain and what-if group and filter by the kind and show the
sentence, so nothing downstream parses English.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Fact = str | int | float | tuple[str, ...]


class ReasonKind(StrEnum):
    """What a pending job is waiting for."""

    NEW = "new"  # not tried yet
    CAPACITY = "capacity"  # no set of live nodes has room for it now
    QUOTA = "quota"  # its queue's deserved quota (non-preemptible and interactive work)
    LIMIT = "limit"  # a hard limit on its queue's path
    PREEMPTING = "preempting"  # victims are stopping for it
    BEHIND = "behind"  # a blocked job ahead of it stops its queue (pending view only)
    RECLAIM = "reclaim"  # no room, and reclaim could not make any (facts: what stopped it)


@dataclass(frozen=True, slots=True)
class Reason:
    """A kind, the facts it rests on (sorted name/value pairs) and a sentence for a person."""

    kind: ReasonKind
    text: str
    facts: tuple[tuple[str, Fact], ...] = ()

    def __str__(self) -> str:
        return self.text

    def fact(self, name: str) -> Fact | None:
        for key, value in self.facts:
            if key == name:
                return value
        return None

    def to_wire(self) -> dict[str, object]:
        """As JSON: {"kind", "text", "facts": {name: value}} (a tuple fact as a list)."""
        facts = {k: list(v) if isinstance(v, tuple) else v for k, v in self.facts}
        return {"kind": self.kind.value, "text": self.text, "facts": facts}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Reason:
        """The inverse of `to_wire`."""
        facts = {
            str(k): tuple(str(x) for x in v) if isinstance(v, list) else v
            for k, v in dict(data.get("facts") or {}).items()
        }
        return cls(ReasonKind(data["kind"]), str(data["text"]), tuple(sorted(facts.items())))

    def prefixed(self, prefix: str, suffix: str = "", **facts: Fact) -> Reason:
        """The same kind, with a sentence around the original one and any facts added."""
        merged = dict(self.facts) | facts
        return Reason(self.kind, f"{prefix}{self.text}{suffix}", tuple(sorted(merged.items())))


def reason(kind: ReasonKind, text: str, **facts: Fact) -> Reason:
    return Reason(kind, text, tuple(sorted(facts.items())))


# Preempt reasons the core issues itself, not a preemption rule (rules explain themselves).
CORE_STOP_REASONS: dict[str, str] = {
    "consolidation": (
        "consolidation: moved to another node so that a job that fits in total free capacity, "
        "but on no single set of nodes, could be placed"
    ),
    "shrink": "shrink: an elastic job gave back tasks (down to min_tasks) to make room",
    "cancelled": "cancelled: a JobCancelled request stopped the running job",
    "node_lost": "node_lost: another node of this gang was lost, so the rest of the gang was stopped",
}
