"""What-if's policy file: queue and cluster overrides and simulated node failures, parsed and applied (pure)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from domain.codec import describe_validation_error, event_to_wire
from domain.events import ClusterConfigured, Event, QueueConfigured
from domain.plugins import validation_context
from domain.simulation import NodeDown

WILDCARD = "*"
Item = tuple[int, Event | NodeDown]  # an input of the re-simulation: an event or a directive


class WhatIfError(ValueError):
    """A policy file or journal that cannot be compared; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Overrides:
    """Queue overrides by queue id (`*` for every queue), cluster overrides, and node failures
    for the what-if side: (ts in ms since the epoch, node), each a simulator NodeDown directive
    (contract section 7)."""

    queues: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cluster: Mapping[str, Any] = field(default_factory=dict)
    nodes_down: tuple[tuple[int, str], ...] = ()


def parse_overrides(document: Any) -> Overrides:
    """`{"queues": {id or "*": {field: value, ...}}, "cluster": {...}}`, as loaded from YAML."""
    if not isinstance(document, Mapping):
        raise WhatIfError(
            "policy file: expected a mapping with `queues:` (and optionally `cluster:`)"
        )
    unknown = sorted(set(document) - {"queues", "cluster", "nodes_down"})
    if unknown:
        raise WhatIfError(
            f"policy file: unknown key(s) {', '.join(map(str, unknown))} "
            "(known: queues, cluster, nodes_down)"
        )
    queues = document.get("queues") or {}
    cluster = document.get("cluster") or {}
    if not isinstance(queues, Mapping) or not all(isinstance(v, Mapping) for v in queues.values()):
        raise WhatIfError("policy file: `queues` maps queue ids (or *) to field overrides")
    if not isinstance(cluster, Mapping):
        raise WhatIfError("policy file: `cluster` maps ClusterConfigured fields to values")
    for name, fields in queues.items():
        if "queue" in fields:
            raise WhatIfError(f"policy file: queues.{name}: a queue cannot be renamed")
    return Overrides(
        queues={str(k): dict(v) for k, v in queues.items()},
        cluster=dict(cluster),
        nodes_down=_nodes_down(document.get("nodes_down") or []),
    )


def _nodes_down(entries: Any) -> tuple[tuple[int, str], ...]:
    """`nodes_down: [{node: N, ts: T}, ...]`, T in ms since the epoch or ISO 8601 (UTC when
    no zone is given), sorted by time."""
    usage = "policy file: `nodes_down` lists {node: NODE, ts: MS or ISO 8601}"
    if not isinstance(entries, list):
        raise WhatIfError(usage)
    found: list[tuple[int, str]] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or set(entry) != {"node", "ts"}:
            raise WhatIfError(usage)
        node, when = entry["node"], entry["ts"]
        if not isinstance(node, str) or not node:
            raise WhatIfError(f"{usage}: node must be a node id")
        found.append((_ms(when, usage), node))
    return tuple(sorted(found))


def _ms(when: Any, usage: str) -> int:
    if isinstance(when, datetime):  # YAML reads an unquoted timestamp as a datetime
        moment = when
    elif isinstance(when, int) and not isinstance(when, bool) and when >= 0:
        return when
    elif isinstance(when, str):
        try:
            moment = datetime.fromisoformat(when)
        except ValueError:
            raise WhatIfError(f"{usage}: ts {when!r} is not a time") from None
    else:
        raise WhatIfError(f"{usage}: ts {when!r} is not a time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def override_queue(event: QueueConfigured, overrides: Overrides) -> QueueConfigured:
    body = event_to_wire(event)
    for name in (WILDCARD, event.queue):
        if name in overrides.queues:
            body = _merge(body, overrides.queues[name])
    try:
        return QueueConfigured.model_validate(body, context=validation_context())
    except ValidationError as exc:
        raise WhatIfError(f"queue {event.queue}: {describe_validation_error(exc)}") from None


def override_cluster(event: ClusterConfigured, overrides: Overrides) -> ClusterConfigured:
    body = _merge(event_to_wire(event), overrides.cluster)
    try:
        return ClusterConfigured.model_validate(body)
    except ValidationError as exc:
        raise WhatIfError(f"cluster: {describe_validation_error(exc)}") from None


def with_nodes_down(items: list[Item], overrides: Overrides, nodes: set[str]) -> list[Item]:
    """The items with the overrides' NodeDown directives, each after every input of its time
    (the simulator folds a group in file order); `nodes` are the journal's nodes."""
    unknown = sorted({node for _, node in overrides.nodes_down} - nodes)
    if unknown:
        raise WhatIfError(f"nodes_down names node(s) not in the journal: {', '.join(unknown)}")
    out = list(items)
    for ts, node in overrides.nodes_down:
        at = next((i for i, (when, _) in enumerate(out) if when > ts), len(out))
        out.insert(at, (ts, NodeDown(node)))
    return out
