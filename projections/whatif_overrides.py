"""What-if's policy file: queue and cluster overrides, parsed and applied to configuration events (pure)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from domain.codec import describe_validation_error, event_to_wire
from domain.events import ClusterConfigured, QueueConfigured
from domain.plugins import validation_context

WILDCARD = "*"


class WhatIfError(ValueError):
    """A policy file or journal that cannot be compared; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Overrides:
    """Queue overrides by queue id (`*` for every queue) and cluster overrides."""

    queues: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cluster: Mapping[str, Any] = field(default_factory=dict)


def parse_overrides(document: Any) -> Overrides:
    """`{"queues": {id or "*": {field: value, ...}}, "cluster": {...}}`, as loaded from YAML."""
    if not isinstance(document, Mapping):
        raise WhatIfError(
            "policy file: expected a mapping with `queues:` (and optionally `cluster:`)"
        )
    unknown = sorted(set(document) - {"queues", "cluster"})
    if unknown:
        raise WhatIfError(
            f"policy file: unknown key(s) {', '.join(map(str, unknown))} (known: queues, cluster)"
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
    return Overrides(queues={str(k): dict(v) for k, v in queues.items()}, cluster=dict(cluster))


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
