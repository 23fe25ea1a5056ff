"""PAI self-level and child-level preemption, priority within a queue, and the one victim selector."""

from __future__ import annotations

from typing import Any

from domain.commands import NodeCommand
from domain.events import Event
from domain.reasons import ReasonKind
from tests.domain.harness import Cluster, event, job, node, queue, simulate

SEED_SELF_LEVEL = {"high_priority": [6, 9], "low_priority": 4, "modules": ["DLC", "DSW"]}
SEED_CHILD_LEVEL = {"priority": [1, 3], "modules": ["DLC", "DSW"]}


def gpu(quota: float, weight: float | None = None, limit: float = -1) -> dict[str, Any]:
    spec: dict[str, Any] = {"quota": quota, "limit": limit}
    if weight is not None:
        spec["over_quota_weight"] = weight
    return {"gpu": spec}


def preempts(commands: list[NodeCommand]) -> list[tuple[str, str, str | None]]:
    return [(c.job, c.reason, c.by) for c in commands if c.type == "Preempt"]


def running(cluster: Cluster, *jobs: Event) -> None:
    """Submits jobs at the next ts and lets the agents start them."""
    cluster.when(cluster.ts + 1, *jobs)
    cluster.agents_obey()


def sibling_teams(self_level: dict[str, Any] | None = SEED_SELF_LEVEL) -> Cluster:
    """team-a (the seed's rule, no share of spare capacity, so fairness never reclaims for it)
    beside team-b, which uses exactly its quota: only the explicit rule can act."""
    cluster = Cluster()
    cluster.given(
        0,
        queue("team-a", resources=gpu(0, weight=0), preemption={"self_level": self_level}),
        queue("team-b", resources=gpu(4)),
        node("n1", gpu=4),
    )
    running(
        cluster,
        job("b-dlc-4", "team-b", priority=4, module="DLC"),
        job("b-dsw-4", "team-b", priority=4, module="DSW"),
        job("b-dlc-5", "team-b", priority=5, module="DLC"),
        job("b-eas-4", "team-b", priority=4, module="EAS"),
    )
    assert len(cluster.node_view("n1").jobs) == 4
    return cluster


def test_seed_self_level_takes_priority_4_dlc_and_dsw_jobs_of_a_sibling() -> None:
    cluster = sibling_teams()
    cluster.when(10, job("a-urgent", "team-a", priority=7, gpu=2))
    assert sorted(preempts(cluster.last)) == [
        ("b-dlc-4", "self_level", "a-urgent"),
        ("b-dsw-4", "self_level", "a-urgent"),
    ]
    assert cluster.dispatched() == []
    cluster.agents_obey()  # the victims stop at the same ts
    assert cluster.dispatched() == ["a-urgent"]
    assert [job_id for job_id, _ in cluster.node_view("n1").jobs] == [
        "a-urgent",
        "b-dlc-5",
        "b-eas-4",
    ]


def test_self_level_never_takes_priority_5_nor_eas_jobs() -> None:
    cluster = sibling_teams()
    cluster.when(10, job("a-urgent", "team-a", priority=9, gpu=3))
    assert preempts(cluster.last) == []  # only 2 GPUs are eligible: nothing is issued
    assert cluster.why("a-urgent")[0] is ReasonKind.CAPACITY


def test_self_level_only_for_jobs_in_the_high_range() -> None:
    cluster = sibling_teams()
    cluster.when(10, job("a-normal", "team-a", priority=5, gpu=1))
    assert preempts(cluster.last) == []


def test_self_level_reaches_below_a_sibling_but_not_into_its_own_queue() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("org", resources=gpu(8)),
        queue(
            "a",
            parent="org",
            resources=gpu(0, weight=0),
            preemption={"self_level": SEED_SELF_LEVEL},
        ),
        queue("b", parent="org", resources=gpu(4)),
        queue("b-sub", parent="b", resources=gpu(4)),
        node("n1", gpu=2),
    )
    running(cluster, job("own", "a", priority=4), job("deep", "b-sub", priority=4))
    cluster.when(10, job("urgent", "a", priority=8))
    assert preempts(cluster.last) == [("deep", "self_level", "urgent")]


def test_invalid_self_level_rule_is_rejected_with_a_reason() -> None:
    bad = {"high_priority": [3, 5], "low_priority": [4, 6], "modules": ["DLC"]}
    out = simulate(
        {"type": "QueueConfigured", "ts": 0, "queue": "a", "preemption": {"self_level": bad}},
        {"type": "JobSubmitted", "ts": 1, "job": "j", "queue": "a"},
    )
    assert [o["type"] for o in out] == ["Rejected", "Rejected"]
    assert "must lie entirely below" in out[0]["reason"]
    assert out[1]["reason"] == "queue 'a' does not exist"  # the queue was never configured


def parent_with_children(child_level: dict[str, Any] | None = SEED_CHILD_LEVEL) -> Cluster:
    cluster = Cluster()
    cluster.given(
        0,
        queue("org", resources=gpu(4), preemption={"child_level": child_level}),
        queue("org-x", parent="org", resources=gpu(2)),
        queue("org-y", parent="org", resources=gpu(2)),
        node("n1", gpu=4),
    )
    running(
        cluster,
        job("x-dlc-2", "org-x", priority=2, module="DLC"),
        job("x-eas-2", "org-x", priority=2, module="EAS"),
        job("y-dsw-3", "org-y", priority=3, module="DSW"),
        job("y-dlc-4", "org-y", priority=4, module="DLC"),
    )
    return cluster


def test_seed_child_level_takes_priority_1_to_3_dlc_and_dsw_jobs_below_the_parent() -> None:
    cluster = parent_with_children()
    cluster.when(10, job("parent-job", "org", priority=5, gpu=2))
    assert sorted(preempts(cluster.last)) == [
        ("x-dlc-2", "child_level", "parent-job"),
        ("y-dsw-3", "child_level", "parent-job"),
    ]
    cluster.agents_obey()
    assert cluster.dispatched() == ["parent-job"]


def test_child_level_is_only_for_jobs_of_the_parent_itself() -> None:
    cluster = parent_with_children()
    cluster.when(10, job("child-job", "org-x", priority=9, gpu=1))
    assert [r for _, r, _ in preempts(cluster.last) if r == "child_level"] == []


def test_self_level_and_child_level_on_one_queue_work_independently() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue(
            "org",
            resources=gpu(2, weight=0),
            preemption={"self_level": SEED_SELF_LEVEL, "child_level": SEED_CHILD_LEVEL},
        ),
        queue("org-x", parent="org", resources=gpu(2)),
        queue("peer", resources=gpu(2)),
        node("n1", gpu=2),
        node("n2", gpu=2),
    )
    running(
        cluster,
        job("x-low", "org-x", priority=2, gpu=2),
        job("peer-low", "peer", priority=4, gpu=2),
    )
    cluster.when(10, job("up", "org", priority=7, gpu=2))  # in the high range: self-level
    assert preempts(cluster.last) == [("peer-low", "self_level", "up")]
    cluster.agents_obey()
    assert cluster.dispatched() == ["up"]
    cluster.when(11, job("down", "org", priority=2, gpu=2))  # outside it: child-level only
    assert preempts(cluster.last) == [("x-low", "child_level", "down")]
    cluster.agents_obey()
    assert cluster.dispatched() == ["down"]


def test_priority_within_a_queue_takes_strictly_lower_priority_jobs() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("a", resources=gpu(2), preemption={"within_queue": True}),
        node("n1", gpu=2),
    )
    running(cluster, job("low", "a", priority=3), job("same", "a", priority=6))
    cluster.when(10, job("equal", "a", priority=6, gpu=2))  # would need "same" too
    assert preempts(cluster.last) == []
    cluster.when(11, job("high", "a", priority=7))  # ordered before "equal" in the queue
    assert preempts(cluster.last) == [("low", "priority", "high")]


def test_priority_preemption_is_off_unless_the_queue_enables_it() -> None:
    cluster = Cluster()
    cluster.given(0, queue("a", resources=gpu(1)), node("n1", gpu=1))
    running(cluster, job("low", "a", priority=1))
    cluster.when(10, job("high", "a", priority=9))
    assert preempts(cluster.last) == []


def test_non_preemptible_and_interactive_jobs_are_never_victims() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        queue("team-a", resources=gpu(0, weight=0), preemption={"self_level": SEED_SELF_LEVEL}),
        queue("team-b", resources=gpu(2)),
        node("n1", gpu=2),
    )
    running(
        cluster,
        job("pinned", "team-b", priority=4, preemptible=False),
        job("notebook", "team-b", priority=4, interactive=True),
    )
    cluster.when(10, job("urgent", "team-a", priority=9))
    assert preempts(cluster.last) == []


def test_least_disruption_lowest_priority_then_most_recently_started() -> None:
    cluster = Cluster()
    rule = {"high_priority": [9, 9], "low_priority": [1, 8], "modules": ["DLC"]}
    cluster.given(
        0,
        queue("team-a", resources=gpu(0, weight=0), preemption={"self_level": rule}),
        queue("team-b", resources=gpu(3)),
        node("n1", gpu=3),
    )
    running(cluster, job("old-2", "team-b", priority=2))
    running(cluster, job("new-2", "team-b", priority=2))
    running(cluster, job("low-1", "team-b", priority=1))
    cluster.when(10, job("one", "team-a", priority=9))
    assert preempts(cluster.last) == [("low-1", "self_level", "one")]
    cluster.agents_obey()
    cluster.when(20, job("two", "team-a", priority=9))
    assert preempts(cluster.last) == [("new-2", "self_level", "two")]


def test_only_the_victims_needed_are_preempted_and_a_gang_victim_whole() -> None:
    cluster = Cluster()
    rule = {"high_priority": [9, 9], "low_priority": [1, 8], "modules": ["DLC"]}
    cluster.given(
        0,
        queue("team-a", resources=gpu(0, weight=0), preemption={"self_level": rule}),
        queue("team-b", resources=gpu(8)),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    running(cluster, job("gang", "team-b", priority=3, gpu=2, tasks=2, node_selector=None))
    running(cluster, job("small", "team-b", priority=1, gpu=2))
    running(cluster, job("other", "team-b", priority=3, gpu=2))
    placements = {c.job: c.node for c in cluster.commands if c.type == "Dispatch"}
    assert len(placements) == 3
    cluster.when(10, job("big", "team-a", priority=9, gpu=4))
    victims = preempts(cluster.last)
    # Freeing "small" (lowest priority) alone cannot give 4 GPUs on one node; the minimal
    # least-disruptive set never includes a job that was not needed.
    assert all(by == "big" for _, _, by in victims)
    stopped = [c for c in cluster.last if c.type == "Preempt"]
    gang_nodes = [c.node for c in stopped if c.job == "gang"]
    assert gang_nodes == [] or len(gang_nodes) == len(cluster.job_view("gang").stopping)
    cluster.agents_obey()
    assert cluster.dispatched() == ["big"]


def test_freed_resources_are_held_for_the_preemptor() -> None:
    cluster = sibling_teams()
    cluster.when(10, job("a-urgent", "team-a", priority=7, gpu=2))
    # Victims acknowledge in a later group, together with a new job of team-b that would fit.
    answers = [
        event("JobPreempted", job=c.job, node=c.node, attempt=c.attempt) for c in cluster.last
    ]
    cluster.when(11, job("b-new", "team-b", priority=9), *answers)
    assert cluster.dispatched() == ["a-urgent"]


def test_elastic_victim_is_shrunk_by_halves_before_anyone_is_preempted_whole() -> None:
    cluster = Cluster()
    rule = {"high_priority": [9, 9], "low_priority": [1, 8], "modules": ["DLC"]}
    cluster.given(
        0,
        queue("team-a", resources=gpu(0, weight=0), preemption={"self_level": rule}),
        queue("team-b", resources=gpu(4)),
        node("n1", gpu=4),
    )
    running(cluster, job("elastic", "team-b", priority=5, tasks=4, min_tasks=1))
    cluster.when(10, job("urgent", "team-a", priority=9, gpu=2))
    stops = [c for c in cluster.last if c.type == "Preempt"]
    # Halving 4 -> 2 frees enough; the job keeps running at 2 tasks.
    assert [(c.job, c.reason, c.tasks) for c in stops] == [("elastic", "shrink", 2)]
    cluster.agents_obey()
    assert cluster.dispatched() == ["urgent"]
    assert cluster.job_view("elastic").placed_tasks == 2
    assert cluster.job_view("elastic").status == "running"


def test_the_preemptor_takes_its_held_room_even_behind_a_blocked_head() -> None:
    cluster = Cluster()
    cluster.given(
        0,
        event("ClusterConfigured", heartbeat_timeout_s=10),
        queue("team-a", resources=gpu(0, weight=0), preemption={"self_level": SEED_SELF_LEVEL}),
        queue("team-b", resources=gpu(2)),
        node("n1", gpu=2),
        node("n2", gpu=2),
    )
    running(
        cluster,
        job("a-big", "team-a", priority=7, gpu=2),
        job("b-low", "team-b", priority=4, gpu=2),
    )
    cluster.when(5000, node("n2", gpu=2), job("a-urgent", "team-a", priority=7, gpu=2))
    assert preempts(cluster.last) == [("b-low", "self_level", "a-urgent")]
    cluster.when(10_000, event("Tick"))  # n1 is lost: a-big goes back to the head of team-a
    assert cluster.job_view("a-big").status == "pending"
    acks = [event("JobPreempted", job="b-low", node="n2", attempt=1)]
    cluster.when(11_000, node("n2", gpu=2), *acks)
    # a-big (older, same priority) blocks team-a's fifo queue, yet the room held for
    # a-urgent is not left idle.
    assert cluster.dispatched() == ["a-urgent"]
    assert cluster.queue_view("team-a").stopped_by == "a-big"


def test_a_job_placed_meanwhile_cannot_use_quota_promised_to_a_preemptor() -> None:
    cluster = Cluster()
    main = {"pool": "main"}
    cluster.given(
        0,
        queue("a", resources=gpu(2), preemption={"within_queue": True}),
        node("n1", gpu=2, labels=main),
        node("n2", gpu=1),
    )
    running(cluster, job("low", "a", priority=1, gpu=2, node_selector=main))
    # Non-preemptible work runs only within deserved quota (2 GPUs): "hi" needs all of it.
    cluster.when(
        10,
        job("hi", "a", priority=9, gpu=2, preemptible=False, node_selector=main),
        job("pinned", "a", priority=5, gpu=1, preemptible=False),
    )
    assert preempts(cluster.last) == [("low", "priority", "hi")]
    assert cluster.dispatched() == []  # n2 is free, but a's quota is promised to "hi"
    assert cluster.why("pinned")[1]["held_for_preemptors"] == 1
    cluster.agents_obey()
    assert cluster.dispatched() == ["hi"]
