"""A team's job topic reaches only its part of the queue tree (domain/teams.py): given / when / then."""

from __future__ import annotations

from domain.teams import team_refusal
from tests.domain.harness import Cluster, event, job, queue


def tree() -> Cluster:
    """Given org with team-a (and team-a's child a-dev) and team-b below it."""
    cluster = Cluster()
    cluster.at(
        1,
        queue("org", 8),
        queue("team-a", 4, parent="org"),
        queue("a-dev", 2, parent="team-a"),
        queue("team-b", 4, parent="org"),
    )
    return cluster


def test_a_team_may_submit_to_its_queue_and_below() -> None:
    cluster = tree()
    for target in ("team-a", "a-dev"):
        assert team_refusal(cluster.state, "team-a", "team-a", job("j", target)) is None


def test_a_team_may_not_submit_to_another_team_or_above_its_queue() -> None:
    cluster = tree()
    for target in ("team-b", "org"):
        reason = team_refusal(cluster.state, "team-a", "team-a", job("j", target))
        assert reason == (
            "team 'team-a' may submit only to queue 'team-a' and the queues below it, "
            f"not to {target!r}"
        )


def test_a_queue_that_does_not_exist_is_outside_every_team() -> None:
    reason = team_refusal(tree().state, "team-a", "team-a", job("j", "team-c"))
    assert reason == (
        "team 'team-a' may submit only to queue 'team-a' and the queues below it, not to 'team-c'"
    )


def test_a_team_may_cancel_only_its_own_jobs() -> None:
    cluster = tree()
    cluster.at(2, job("theirs", "team-b"), job("ours", "a-dev"))
    assert (
        team_refusal(cluster.state, "team-a", "team-a", event("JobCancelled", job="ours")) is None
    )
    reason = team_refusal(cluster.state, "team-a", "team-a", event("JobCancelled", job="theirs"))
    assert reason == (
        "team 'team-a' may cancel only jobs in queue 'team-a' and below it; "
        "job 'theirs' is in 'team-b'"
    )


def test_a_team_mapped_to_the_root_reaches_the_whole_tree() -> None:
    cluster = tree()
    assert team_refusal(cluster.state, "platform", "org", job("j", "team-b")) is None
