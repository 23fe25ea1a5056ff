"""Structured reasons: a kind, the facts, a sentence; and their wire form."""

from __future__ import annotations

from domain.reasons import Reason, ReasonKind, reason


def test_a_reason_survives_its_wire_form() -> None:
    why = reason(ReasonKind.PREEMPTING, "waiting for a, b", awaiting=("a", "b"), tasks=2)
    assert why.to_wire() == {
        "kind": "preempting",
        "text": "waiting for a, b",
        "facts": {"awaiting": ["a", "b"], "tasks": 2},
    }
    assert Reason.from_wire(why.to_wire()) == why


def test_wrapping_a_reason_keeps_its_kind_and_adds_facts() -> None:
    why = reason(ReasonKind.QUOTA, "queue a would exceed its deserved quota", queue="a")
    wrapped = why.prefixed("interactive jobs run only within deserved quota: ", work="interactive")
    assert (wrapped.kind, wrapped.fact("queue"), wrapped.fact("work")) == (
        ReasonKind.QUOTA,
        "a",
        "interactive",
    )
    assert str(wrapped).startswith("interactive jobs run only within deserved quota: queue a")
