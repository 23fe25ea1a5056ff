"""Queue manifests (YAML documents already parsed to dicts) to QueueConfigured events (pure).

Native documents are QueueConfigured objects without `type` (or with it). A document may
also hold a list under `queues`. KAI `Queue` resources (apiVersion scheduling.run.ai/v2) are
accepted too, alone or in a Kubernetes `List`; docs/quotas.md maps their fields. Parents are
ordered before their children so one file can create a whole tree.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from domain.codec import describe_validation_error
from domain.events import QueueConfigured
from domain.plugins import validation_context


class ManifestError(ValueError):
    """A manifest that cannot become queue events; the message names the document and field."""


def queue_events(documents: list[Any]) -> list[QueueConfigured]:
    """Every queue in the documents as a QueueConfigured, parents first."""
    events: list[QueueConfigured] = []
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        items = (
            document.get("queues")
            if isinstance(document, dict) and "queues" in document
            else document
        )
        if isinstance(items, dict) and items.get("kind") in KUBERNETES_LISTS:
            items = items.get("items") or []
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, dict) and "kind" in item:
                events.append(_kai(item, number))
            else:
                events.append(_native(item, number))
    return _parents_first(events)


KAI_API_VERSION = "scheduling.run.ai/v2"
KUBERNETES_LISTS = ("List", "QueueList")
_KAI_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_KAI_SPEC = frozenset({"displayName", "parentQueue", "priority", "resources"})
_KAI_RESOURCES = ("gpu", "cpu", "memory")
_KAI_AMOUNTS = {"quota": "quota", "limit": "limit", "overQuotaWeight": "over_quota_weight"}


def _kai(item: dict[str, Any], number: int) -> QueueConfigured:
    """A KAI Queue: metadata.name, spec.parentQueue, spec.priority, spec.resources.

    Kubernetes metadata beyond the name (namespace, labels, uid, ...) and `status` are the
    cluster's business and ignored; an unknown field in `spec` is refused, as on the wire,
    since silently dropping a setting would schedule differently from what was written.
    """
    kind = item.get("kind")
    metadata = item.get("metadata")
    name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
    where = f"document {number} ({kind} {name})"
    if kind != "Queue":
        raise ManifestError(f"{where}: kind must be Queue (or a List of them)")
    if item.get("apiVersion") != KAI_API_VERSION:
        raise ManifestError(
            f"{where}: apiVersion {item.get('apiVersion')!r} is not supported; use {KAI_API_VERSION}"
        )
    _refuse_unknown(where, "", item, _KAI_TOP)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise ManifestError(f"{where}: metadata.name is required")
    spec = item.get("spec") or {}
    if not isinstance(spec, dict):
        raise ManifestError(f"{where}: spec must be a mapping")
    _refuse_unknown(where, "spec.", spec, _KAI_SPEC)
    resources: dict[str, dict[str, Any]] = {}
    given = spec.get("resources") or {}
    if not isinstance(given, dict):
        raise ManifestError(f"{where}: spec.resources must be a mapping")
    _refuse_unknown(where, "spec.resources.", given, frozenset(_KAI_RESOURCES))
    for resource in _KAI_RESOURCES:
        amounts = given.get(resource)
        if amounts is None:
            continue  # unmentioned: unmanaged for this queue (docs/quotas.md)
        if not isinstance(amounts, dict):
            raise ManifestError(f"{where}: spec.resources.{resource} must be a mapping")
        _refuse_unknown(where, f"spec.resources.{resource}.", amounts, frozenset(_KAI_AMOUNTS))
        resources[resource] = {_KAI_AMOUNTS[key]: value for key, value in amounts.items()}
    data: dict[str, Any] = {
        "type": "QueueConfigured",
        "queue": metadata["name"],
        "parent": spec.get("parentQueue") or None,
        "resources": resources,
    }
    if spec.get("priority") is not None:
        data["priority"] = spec["priority"]
    try:
        return QueueConfigured.model_validate(data, context=validation_context())
    except ValidationError as exc:
        raise ManifestError(f"{where}: {describe_validation_error(exc)}") from None


def _refuse_unknown(
    where: str, prefix: str, mapping: dict[str, Any], known: frozenset[str]
) -> None:
    unknown = sorted(str(key) for key in mapping if key not in known)
    if unknown:
        raise ManifestError(
            f"{where}: unknown field {prefix}{unknown[0]} (known: {', '.join(sorted(known))})"
        )


def _native(item: Any, number: int) -> QueueConfigured:
    if not isinstance(item, dict):
        raise ManifestError(f"document {number}: expected a mapping describing a queue")
    data = {"type": "QueueConfigured", **item}
    try:
        return QueueConfigured.model_validate(data, context=validation_context())
    except ValidationError as exc:
        name = item.get("queue", "?")
        raise ManifestError(
            f"document {number} (queue {name}): {describe_validation_error(exc)}"
        ) from None


def _parents_first(events: list[QueueConfigured]) -> list[QueueConfigured]:
    by_name = {event.queue: event for event in events}
    ordered: list[QueueConfigured] = []
    placed: set[str] = set()

    def place(event: QueueConfigured, path: tuple[str, ...]) -> None:
        if event.queue in placed:
            return
        if event.queue in path:
            raise ManifestError(f"queues {' -> '.join((*path, event.queue))} form a cycle")
        parent = by_name.get(event.parent) if event.parent else None
        if parent is not None:
            place(parent, (*path, event.queue))
        placed.add(event.queue)
        ordered.append(event)

    for event in events:
        place(event, ())
    return ordered
