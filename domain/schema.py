"""JSON Schema (draft 2020-12) of every event and command on QuotaFlow's topics (pure)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from domain.codec import INGRESS_TYPES
from domain.commands import Dispatch, Preempt, Rejected
from domain.events import EVENT_TYPES
from domain.plugins import QUEUE_POLICIES

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
COMMAND_TYPES: tuple[type[BaseModel], ...] = (Dispatch, Preempt, Rejected)

# The scheduler-only topics, alongside the ingress ones the codec enforces.
_WRITTEN_BY_SCHEDULER: dict[str, list[str]] = {
    "quotaflow.journal": [*sorted(EVENT_TYPES)],
    "quotaflow.commands": ["Dispatch", "Preempt"],
    "quotaflow.rejected": ["Rejected"],
}

# Fields whose wire form is a priority range [lo, hi] that also accepts a single priority n.
_PRIORITY_RANGES: dict[str, tuple[str, ...]] = {
    "SelfLevelRule": ("high_priority", "low_priority"),
    "ChildLevelRule": ("priority",),
}


def json_schema() -> dict[str, Any]:
    """One schema document: `oneOf` every top-level object, each defined under `$defs`.

    Events are described as producers may send them (validation: defaults optional).
    Commands and rejections as the scheduler writes them (serialization: every field present
    except a Dispatch's optional job details, written only when set).
    Journal records are events with two more integer fields, `seq` and `ts`.
    """
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        *((cls, "validation") for cls in EVENT_TYPES.values()),
        *((cls, "serialization") for cls in COMMAND_TYPES),
    ]
    refs, definitions = models_json_schema(models, ref_template="#/$defs/{model}")
    defs: dict[str, Any] = copy.deepcopy(definitions.get("$defs", {}))
    for name in EVENT_TYPES:
        _require(defs[name], ["type"])
    for cls in COMMAND_TYPES:
        body = defs[cls.__name__]
        optional = getattr(cls, "OPTIONAL_ON_WIRE", ())  # written only when set
        _require(body, [name for name in body.get("properties", {}) if name not in optional])
    kind = defs["QueuePolicyConfig"]["properties"]["kind"]
    kind["enum"] = list(QUEUE_POLICIES)  # the registry's policies (domain.plugins)
    defs["QueuePolicyConfig"]["properties"]["kind"] = dict(sorted(kind.items()))
    for name, fields in _PRIORITY_RANGES.items():
        for field in fields:
            _accept_single_priority(defs[name]["properties"][field])
    topics = {topic: [cls.__name__ for cls in types] for topic, types in INGRESS_TYPES.items()}
    topics.update(_WRITTEN_BY_SCHEDULER)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "QuotaFlow wire contract",
        "description": (
            "Every JSON object on QuotaFlow's Kafka topics (the QuotaFlow contract §1-3). "
            "Unknown fields are refused. Journal records are the events plus integer "
            "`seq` and `ts`; `x-quotaflow-topics` lists which types each topic carries."
        ),
        "x-quotaflow-topics": topics,
        "oneOf": [refs[model] for model in models],
        "$defs": {name: defs[name] for name in sorted(defs)},
    }


def _require(body: dict[str, Any], fields: list[str]) -> None:
    required = list(body.get("required", []))
    required.extend(field for field in fields if field not in required)
    body["required"] = required


def _accept_single_priority(prop: dict[str, Any]) -> None:
    pair = {key: value for key, value in prop.items() if key not in ("title", "description")}
    prop.clear()
    prop["anyOf"] = [{"type": "integer", "minimum": 1, "maximum": 9}, pair]
    prop["description"] = "A priority range [lo, hi]; a single priority n means [n, n]."
