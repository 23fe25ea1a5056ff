"""Queue manifests: native documents and KAI Queue resources (KAI's queue documentation) become QueueConfigured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from domain.events import Event
from domain.manifests import ManifestError, queue_events
from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, job, node

KAI = Path(__file__).parent.parent / "scenarios" / "kai"


def load(*names: str) -> list[Any]:
    documents: list[Any] = []
    for name in names:
        documents += list(yaml.safe_load_all((KAI / name).read_text()))
    return documents


def kai_cluster() -> Cluster:
    events: list[Event] = list(
        queue_events(load("ml-team.yaml", "burst-queue.yaml", "research-team.yaml"))
    )
    cluster = Cluster()
    cluster.given(0, *events, node("n1", gpu=4, cpu=8000))
    assert cluster.rejections == []
    return cluster


def test_kai_fields_map_onto_queue_configured() -> None:
    events = queue_events(load("ml-team.yaml", "research-team.yaml", "burst-queue.yaml"))
    assert [e.queue for e in events] == ["research-team", "ml-team", "burst-queue"]  # parents first
    research, ml, burst = events
    assert research.parent is None and research.priority == 0
    assert research.resources["gpu"].quota == 1 and research.resources["gpu"].limit == 2
    assert "memory" not in research.resources
    assert ml.parent == "research-team" and ml.priority == 200
    assert ml.resources["cpu"].over_quota_weight == 2
    assert ml.resources["gpu"].limit == 0  # unset: nothing beyond quota
    assert burst.resources["gpu"].quota == 0 and burst.resources["gpu"].limit == -1
    assert burst.resources["cpu"].quota == -1


def test_the_full_example_queue_loads() -> None:
    [example] = queue_events(load("example-queue.yaml"))
    assert example.priority == 100
    assert example.resources["memory"].quota == 4096
    assert example.resources["gpu"].limit == 4


def test_kai_limits_behave_as_the_seed_says() -> None:
    cluster = kai_cluster()
    cluster.when(1, job("m0", "ml-team"), job("m1", "ml-team"))
    assert cluster.dispatched() == ["m0"]
    assert cluster.why("m1") == (
        ReasonKind.LIMIT,
        {"queue": "ml-team", "breach": "gpu 2 > limit 1"},
    )
    cluster.when(2, job("r0", "research-team"), job("r1", "research-team"))
    assert cluster.dispatched() == ["r0"]  # research-team's subtree may grow to 2 GPUs, no more
    assert cluster.why("r1")[0] is ReasonKind.LIMIT
    assert str(cluster.why("r1")[1]["breach"]).endswith("> limit 2")


def test_burst_queue_uses_idle_gpus_without_a_guarantee_and_is_reclaimed_first() -> None:
    cluster = kai_cluster()
    cluster.when(1, *[job(f"b{i}", "burst-queue") for i in range(4)])
    assert len(cluster.dispatched()) == 4  # idle GPUs are not wasted
    assert [c.reason for c in cluster.last] == ["over_quota"] * 4
    cluster.agents_obey()
    cluster.when(2, job("m0", "ml-team"))
    assert [(c.type, c.reason, getattr(c, "by", None)) for c in cluster.last] == [
        ("Preempt", "reclaim", "m0")
    ]
    cluster.agents_obey()
    assert cluster.dispatched() == ["m0"]
    burst = cluster.queue_view("burst-queue")
    research = cluster.queue_view("research-team")
    assert (research.fair_share[0], burst.fair_share[0]) == (1000, 3000)


def test_burst_queue_cpu_is_unlimited_quota() -> None:
    cluster = kai_cluster()
    cluster.when(1, job("c", "burst-queue", resources={"cpu": 8000}, interactive=True))
    assert cluster.dispatched() == ["c"]
    assert cluster.last[0].reason == "quota"


def test_lists_and_native_documents_mix() -> None:
    kai_list = {"apiVersion": "v1", "kind": "List", "items": load("research-team.yaml")}
    native = {"queue": "solo", "resources": {"gpu": {"quota": 1}}}
    events = queue_events([kai_list, native])
    assert [e.queue for e in events] == ["research-team", "solo"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"apiVersion": "scheduling.run.ai/v1"},
            "apiVersion 'scheduling.run.ai/v1' is not supported",
        ),
        ({"kind": "Pod"}, "kind must be Queue"),
        ({"metadata": {}}, "metadata.name is required"),
        ({"spec": {"preemptMinRuntime": "5m"}}, "unknown field spec.preemptMinRuntime"),
        (
            {"spec": {"resources": {"gpu": {"quota": 1, "min": 2}}}},
            "unknown field spec.resources.gpu.min",
        ),
        ({"spec": {"resources": {"gpu": {"quota": -3}}}}, "resources.gpu.quota"),
    ],
)
def test_bad_kai_manifests_are_refused_naming_the_field(
    change: dict[str, Any], message: str
) -> None:
    document = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}}
    document.update(change)
    with pytest.raises(ManifestError, match="document 1") as caught:
        queue_events([document])
    assert message in str(caught.value)
