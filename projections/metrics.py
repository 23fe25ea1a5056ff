"""Prometheus metrics of the projections process: the view's position, lag and the numbers it folded (I/O shell edge, no I/O itself).

Collected when Prometheus scrapes, from the view the process serves; the lag is refreshed
by the process just before (projections/app.py). Names: docs/operations.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from domain.gauges import state_gauges
from projections.view import View


class ViewCollector(Collector):
    """Gauges over the served view and the process's liveness."""

    def __init__(self, view: Callable[[], View], liveness: Callable[[], dict[str, Any]]) -> None:
        self.view = view
        self.liveness = liveness

    def collect(self) -> Iterator[Metric]:
        view = self.view()
        live = self.liveness()
        yield _gauge("quotaflow_projections_journal_seq", "Last journal seq folded", view.state.seq)
        records = CounterMetricFamily(
            "quotaflow_projections_records", "Journal records folded into the view"
        )
        records.add_metric([], view.records)
        yield records
        lag = GaugeMetricFamily(
            "quotaflow_projections_lag_records",
            "Records on the journal and commands topics not yet read",
        )
        if live.get("lag") is not None:
            lag.add_metric([], live["lag"])
        yield lag
        last = GaugeMetricFamily(
            "quotaflow_projections_last_record_timestamp_seconds",
            "Wall time the last record was read",
        )
        if live.get("last_record_s") is not None:
            last.add_metric([], live["last_record_s"])
        yield last
        derived, observed = view.check.unmatched()
        mismatch = GaugeMetricFamily(
            "quotaflow_projections_command_mismatches",
            "Commands derived but not seen on the topic, and seen but not derived",
            labels=["side"],
        )
        mismatch.add_metric(["derived_not_observed"], derived)
        mismatch.add_metric(["observed_not_derived"], observed)
        yield mismatch
        preempted = CounterMetricFamily(
            "quotaflow_projections_preemptions",
            "Preempt commands against each queue's jobs, as folded",
            labels=["queue"],
        )
        for queue_id, count in sorted(view.preemptions.items()):
            preempted.add_metric([queue_id], count)
        yield preempted
        for family in state_gauges(view.state):
            gauge = GaugeMetricFamily(f"quotaflow_{family.name}", family.help, labels=family.labels)
            for labels, value in family.samples:
                gauge.add_metric(labels, value)
            yield gauge


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text)
    family.add_metric([], float(value))
    return family


def registry_for(
    view: Callable[[], View], liveness: Callable[[], dict[str, Any]]
) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ViewCollector(view, liveness))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
