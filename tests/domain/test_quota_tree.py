"""The queue tree: any depth, jobs at any level, and configuration refused with actionable reasons."""

from __future__ import annotations

from domain.events import Event
from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, event, job, node


def gpu_queue(name: str, quota: float, limit: float = -1, **fields: object) -> Event:
    return event(
        "QueueConfigured", queue=name, resources={"gpu": {"quota": quota, "limit": limit}}, **fields
    )


def reasons(cluster: Cluster) -> list[str]:
    return [reason for _, reason in cluster.rejections]


def test_unknown_parent_is_refused() -> None:
    cluster = Cluster()
    cluster.when(0, gpu_queue("team", 1, parent="ghost"))
    assert reasons(cluster) == ["parent queue 'ghost' does not exist; configure it first"]


def test_moving_a_queue_below_its_own_descendant_is_refused_as_a_cycle() -> None:
    cluster = Cluster()
    cluster.given(
        0, gpu_queue("a", -1), gpu_queue("b", -1, parent="a"), gpu_queue("c", -1, parent="b")
    )
    cluster.when(1, gpu_queue("a", -1, parent="c"))
    assert reasons(cluster) == ["parent 'c' is below queue 'a': that would make a cycle"]
    assert cluster.queue_view("a").parent is None


def test_childrens_quotas_above_the_parents_are_refused_with_the_numbers() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("org", 4), gpu_queue("t1", 3, parent="org"))
    cluster.when(1, gpu_queue("t2", 1.5, parent="org"))
    assert reasons(cluster) == [
        "gpu: children's quotas (t1 3 + t2 1.5 = 4.5) exceed parent 'org' quota 4"
    ]


def test_shrinking_a_parent_below_its_childrens_quotas_is_refused() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("org", 4), gpu_queue("t1", 3, parent="org"))
    cluster.when(1, gpu_queue("org", 2))
    assert reasons(cluster) == ["gpu: children's quotas (t1 3 = 3) exceed parent 'org' quota 2"]


def test_an_unlimited_child_needs_an_unlimited_parent() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("org", 4), gpu_queue("free", -1))
    cluster.when(1, gpu_queue("t1", -1, parent="org"), gpu_queue("t2", -1, parent="free"))
    assert len(reasons(cluster)) == 1
    assert "unlimited quota but 'org' guarantees only 4" in reasons(cluster)[0]


def test_a_queue_with_children_or_jobs_cannot_be_deleted() -> None:
    cluster = Cluster()
    cluster.given(0, gpu_queue("org", 4), gpu_queue("t1", 2, parent="org"), node("n1", gpu=1))
    cluster.given(1, job("j", "t1"))
    cluster.when(2, event("QueueDeleted", queue="org"), event("QueueDeleted", queue="t1"))
    assert reasons(cluster) == [
        "queue 'org' still has child queues: t1; delete them first",
        "queue 't1' still has 1 job(s) pending or running; cancel them or wait",
    ]
    cluster.finish(3, "j")
    cluster.when(4, event("QueueDeleted", queue="t1"), event("QueueDeleted", queue="org"))
    assert cluster.queue_ids() == []


def test_jobs_run_at_any_depth_and_in_parent_queues() -> None:
    cluster = Cluster()
    chain = [gpu_queue("l0", 8)] + [gpu_queue(f"l{d}", 1, parent=f"l{d - 1}") for d in range(1, 6)]
    cluster.given(0, *chain, node("n1", gpu=8))
    cluster.when(1, job("deep", "l5"), job("middle", "l2"), job("top", "l0"))
    assert sorted(cluster.dispatched()) == ["deep", "middle", "top"]
    assert cluster.queue_view("l0").subtree_allocated.gpu == 3000
    assert cluster.queue_view("l2").subtree_allocated.gpu == 2000


def test_a_limit_anywhere_on_the_path_caps_the_subtree() -> None:
    cluster = Cluster()
    cluster.given(
        0, gpu_queue("org", 1, limit=2), gpu_queue("t1", 1, parent="org"), node("n1", gpu=8)
    )
    cluster.when(1, job("a", "t1"), job("b", "t1"), job("c", "t1"))
    assert cluster.dispatched() == ["a", "b"]
    assert cluster.why("c") == (ReasonKind.LIMIT, {"queue": "org", "breach": "gpu 3 > limit 2"})


def test_a_limit_set_later_on_a_parent_caps_jobs_that_ran_under_no_limit() -> None:
    # Given a team under an organisation with no limit anywhere, running a job; the team
    # tries every job it has (round robin), so each pending one meets the cap itself
    cluster = Cluster()
    team = gpu_queue("t1", 1, parent="org", policy={"kind": "round_robin"})
    cluster.given(0, gpu_queue("org", 1), team, node("n1", gpu=8))
    cluster.when(1, job("a", "t1"))
    assert cluster.dispatched() == ["a"]
    # When the organisation is capped at 2 GPUs, and three more jobs come
    cluster.when(2, gpu_queue("org", 1, limit=2), job("b", "t1"), job("c", "t1"))
    # Then only one more runs: the cap is read from the configuration as it is now
    assert cluster.dispatched() == ["b"]
    cluster.when(3, job("d", "t1"))
    assert cluster.dispatched() == []
    assert cluster.why("c") == (ReasonKind.LIMIT, {"queue": "org", "breach": "gpu 3 > limit 2"})
    assert cluster.why("d") == (ReasonKind.LIMIT, {"queue": "org", "breach": "gpu 3 > limit 2"})


def test_parents_own_interactive_jobs_use_only_the_quota_its_children_leave() -> None:
    """Guarantees handed down to children are not used up by the parent's own jobs."""
    cluster = Cluster()
    cluster.given(0, gpu_queue("org", 4), gpu_queue("t1", 3, parent="org"), node("n1", gpu=8))
    cluster.when(1, job("i1", "org", interactive=True), job("i2", "org", interactive=True))
    assert cluster.dispatched() == ["i1"]
    kind, facts = cluster.why("i2")
    assert (kind, facts["breach"], facts["counted"]) == (
        ReasonKind.QUOTA,
        "gpu 2 > quota 1",
        "non-preemptible",
    )
