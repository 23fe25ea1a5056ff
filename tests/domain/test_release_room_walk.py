"""The victim search under a rule that bounds releases: a queue with no release room left is not walked."""

from __future__ import annotations

from domain.cycle.framework import CycleView
from domain.plugins import Plugins
from domain.reasons import ReasonKind
from domain.rules.reclaim import Reclaim
from domain.state import Job
from tests.domain.harness import Cluster, job, node, queue


class CountingReclaim(Reclaim):
    """Reclaim that records each verdict of its whole-set check."""

    def __init__(self) -> None:
        self.verdicts: list[tuple[tuple[str, ...], bool]] = []

    def allows_after(self, cycle: CycleView, job: Job, victims: list[Job]) -> bool:
        verdict = super().allows_after(cycle, job, victims)
        self.verdicts.append((tuple(v.id for v in victims), verdict))
        return verdict


def test_victims_beyond_their_queues_release_room_are_refused_without_being_tried() -> None:
    # Given b (deserved 3) running 5 GPUs and c (deserved 1) running 3, so that b may release
    # 2 and c 2, on two full nodes: n1 holds four of b's jobs, n2 one of b's and three of c's
    rule = CountingReclaim()
    cluster = Cluster(Plugins(preemption_rules=[rule]))
    cluster.given(
        0,
        queue("a", gpu_quota=4),
        queue("b", gpu_quota=3),
        queue("c", gpu_quota=1),
        node("n1", gpu=4, labels={"pool": "one"}),
        node("n2", gpu=4, labels={"pool": "two"}),
    )
    one, two = {"pool": "one"}, {"pool": "two"}
    cluster.given(1, *(job(f"b{i}", "b", node_selector=one) for i in range(1, 5)))
    cluster.given(1, job("b5", "b", node_selector=two))
    cluster.given(1, *(job(f"c{i}", "c", node_selector=two) for i in range(1, 4)))
    cluster.agents_obey()
    rule.verdicts.clear()

    # When a asks for 4 GPUs on one node: n1 needs four of b's jobs stopped, n2 one of b's
    # and three of c's; either is beyond what b or c may release
    issued = cluster.when(2, job("big", "a", gpu=4))

    # Then nothing is preempted, and every victim the search took was one the rule allowed:
    # the rest were beyond what their queue may release and were refused before any trial
    assert cluster.preempted(issued) == []
    assert cluster.why("big")[0] is ReasonKind.RECLAIM  # why reclaim did not help
    assert rule.verdicts, "the search ran"
    assert [victims for victims, allowed in rule.verdicts if not allowed] == []


def test_a_walk_rolled_back_leaves_the_next_walk_its_queues_whole_release_room() -> None:
    # Given reclaim alone, and b (deserved 0) running two 4-GPU jobs on two 4-GPU nodes, all
    # of which it may release once a (deserved 8) asks
    cluster = Cluster(Plugins(preemption_rules=[Reclaim()]))
    cluster.given(
        0,
        queue("a", gpu_quota=8),
        queue("b", gpu_quota=0),
        node("n1", gpu=4),
        node("n2", gpu=4),
    )
    cluster.given(1, job("b1", "b", gpu=4), job("b2", "b", gpu=4))
    cluster.agents_obey()

    # When a asks for a gang of two 4-GPU tasks: the cheapest node's set (one of b's jobs)
    # frees one node, not enough, so the search starts again with every node's set
    issued = cluster.when(2, job("big", "a", gpu=4, tasks=2))

    # Then both of b's jobs are preempted: the first walk's release, rolled back, did not
    # count against b's room in the second
    assert sorted(cluster.preempted(issued)) == ["b1", "b2"]
