"""A queue's per-resource quota, limit and over-quota weight, in internal units (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from domain.events import QueueConfigured
from domain.resources import RESOURCE_NAMES, Resources, gpu_to_milli
from domain.wire_types import QueueResource

UNLIMITED = -1
NO_LIMIT = (None, None, None)  # QuotaSpec.limit of a queue capped in no resource


def _to_units(name: str, amount: float) -> int:
    if amount == UNLIMITED:
        return UNLIMITED
    return gpu_to_milli(amount) if name == "gpu" else int(amount)


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """quota: deserved amount (-1 unlimited); limit: hard cap (None: no cap); weight: over-quota weight.

    A resource a queue does not mention at all is not managed for it: no deserved quota and no
    cap (weight 1). This lets a GPU-only queue run jobs that also ask for cpu and memory; a
    resource that is mentioned follows KAI exactly (limit 0 or unset means nothing beyond quota).
    """

    quota: tuple[int, int, int] = (0, 0, 0)
    limit: tuple[int | None, int | None, int | None] = NO_LIMIT
    weight: tuple[float, float, float] = (1.0, 1.0, 1.0)
    managed: tuple[bool, bool, bool] = (True, True, True)  # False: the queue never mentions it

    @staticmethod
    def from_config(config: QueueConfigured) -> QuotaSpec:
        quotas: list[int] = []
        limits: list[int | None] = []
        weights: list[float] = []
        managed: list[bool] = []
        for name in RESOURCE_NAMES:
            spec: QueueResource | None = config.resources.get(name)  # type: ignore[call-overload]
            managed.append(spec is not None)
            if spec is None:
                quotas.append(0)
                limits.append(None)
                weights.append(1.0)
                continue
            quota = _to_units(name, spec.quota)
            limit = _to_units(name, spec.limit)
            quotas.append(quota)
            if limit == UNLIMITED or (limit == 0 and quota == UNLIMITED):
                limits.append(None)
            elif limit == 0:
                limits.append(quota)
            else:
                limits.append(max(limit, quota))
            if spec.over_quota_weight is not None:
                weights.append(float(spec.over_quota_weight))
            elif spec.quota in (0, UNLIMITED):
                weights.append(1.0)
            else:
                weights.append(float(spec.quota))
        return QuotaSpec(
            (quotas[0], quotas[1], quotas[2]),
            (limits[0], limits[1], limits[2]),
            (weights[0], weights[1], weights[2]),
            (managed[0], managed[1], managed[2]),
        )

    def own_quota(self, children: list[QuotaSpec]) -> tuple[int, int, int]:
        """The deserved quota of the queue's own jobs: what its quota leaves after its
        children's (unlimited when its quota is), per resource."""
        own: list[int] = []
        for index in range(3):
            quota = self.quota[index]
            if quota == UNLIMITED:
                own.append(UNLIMITED)
            else:
                given = sum(max(0, child.quota[index]) for child in children)
                own.append(max(0, quota - given))
        return (own[0], own[1], own[2])

    def within_limit(self, amount: Resources) -> bool:
        for index, value in enumerate(amount.as_tuple()):
            cap = self.limit[index]
            if cap is not None and value > cap:
                return False
        return True

    def within_quota(self, amount: Resources) -> bool:
        return self.quota_breach(amount) is None

    def limit_breach(self, amount: Resources) -> str | None:
        """Names the first resource over its limit, e.g. 'gpu 5 > limit 4'."""
        for index, value in enumerate(amount.as_tuple()):
            cap = self.limit[index]
            if cap is not None and value > cap:
                return f"{RESOURCE_NAMES[index]} {_show(index, value)} > limit {_show(index, cap)}"
        return None

    def quota_breach(
        self, amount: Resources, quota: tuple[int, int, int] | None = None
    ) -> str | None:
        """Names the first managed resource over `quota` (default: the queue's own quota)."""
        deserved_all = self.quota if quota is None else quota
        for index, value in enumerate(amount.as_tuple()):
            deserved = deserved_all[index]
            if not self.managed[index] or deserved == UNLIMITED:
                continue
            if value > deserved:
                return f"{RESOURCE_NAMES[index]} {_show(index, value)} > quota {_show(index, deserved)}"
        return None


def _show(index: int, value: int) -> str:
    if index == 0:
        whole, rest = divmod(value, 1000)
        return str(whole) if rest == 0 else str(value / 1000)
    return str(value)
