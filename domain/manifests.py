"""Queue manifests (YAML documents already parsed to dicts) to QueueConfigured events (pure).

Native documents are QueueConfigured objects without `type` (or with it). A document may
also hold a list under `queues`. Parents are ordered before their children so one file can
create a whole tree.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from domain.codec import describe_validation_error
from domain.events import QueueConfigured


class ManifestError(ValueError):
    """A manifest that cannot become queue events; the message names the document and field."""


def queue_events(documents: list[Any]) -> list[QueueConfigured]:
    """Every queue in the documents as a QueueConfigured, parents first."""
    events: list[QueueConfigured] = []
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        items = document.get("queues") if isinstance(document, dict) and "queues" in document else document
        for item in items if isinstance(items, list) else [items]:
            events.append(_native(item, number))
    return _parents_first(events)


def _native(item: Any, number: int) -> QueueConfigured:
    if not isinstance(item, dict):
        raise ManifestError(f"document {number}: expected a mapping describing a queue")
    data = {"type": "QueueConfigured", **item}
    try:
        return QueueConfigured.model_validate(data)
    except ValidationError as exc:
        name = item.get("queue", "?")
        raise ManifestError(f"document {number} (queue {name}): {describe_validation_error(exc)}") from None


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
