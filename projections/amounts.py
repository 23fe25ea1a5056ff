"""How the projections show amounts and a queue's numbers to people: gpu in devices, quotas, limits (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.quota import UNLIMITED
from domain.resources import RESOURCE_NAMES, milli_to_gpu
from domain.state import Queue


def amount(index: int, value: float) -> float | int:
    """An internal amount (gpu in thousandths) as users read it: gpu in devices."""
    if index == 0:
        if float(value).is_integer():
            return milli_to_gpu(int(value))
        return round(value / 1000, 3)
    return int(value) if float(value).is_integer() else round(value, 3)


def resources_dict(values: Iterable[float]) -> dict[str, float | int]:
    return {
        name: amount(i, v) for i, (name, v) in enumerate(zip(RESOURCE_NAMES, values, strict=True))
    }


def _limit(value: int | None, index: int) -> float | int | None:
    return None if value is None else amount(index, value)


def _quota(value: int, index: int) -> float | int | str:
    return "unlimited" if value == UNLIMITED else amount(index, value)


def queue_numbers(queue: Queue) -> dict[str, Any]:
    """Per resource: deserved quota, fair share, allocated (whole subtree), limit (None: no cap)."""
    resources: dict[str, Any] = {}
    for index, name in enumerate(RESOURCE_NAMES):
        resources[name] = {
            "deserved": _quota(queue.quota.quota[index], index),
            "fair_share": amount(index, queue.fair_share[index]),
            "allocated": amount(index, queue.subtree_allocated.as_tuple()[index]),
            "own_allocated": amount(index, queue.allocated.as_tuple()[index]),
            "limit": _limit(queue.quota.limit[index], index),
        }
    return {"queue": queue.id, "resources": resources}


def ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0 else round(part / whole, 4)
