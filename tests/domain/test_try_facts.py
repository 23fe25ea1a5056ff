"""A try's facts (domain/cycle/try_facts.py): each fairness rule is asked once per blocked
try, and the commands and reasons are those of tries that ask every rule again (given /
when / then, and hypothesis over generated clusters)."""

from __future__ import annotations

from collections import Counter
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings

from domain.cycle.session import Session
from domain.cycle.try_facts import TryFacts
from domain.cycle.victims import VictimSearch
from domain.plugins import Plugins
from domain.rules.reclaim import Reclaim
from domain.rules.reclaim_deserved import ReclaimDeserved
from tests.domain.harness import Cluster, job, node, queue
from tests.domain.test_blocked_shapes import look_alike_backlogs, simulate
from tests.domain.test_failed_plans import fragmenting_arrivals
from tests.domain.test_reclaim_properties import scenarios


def assert_as_when_every_rule_is_asked_again(lines: list[dict[str, Any]]) -> None:
    remembered = simulate(lines)
    with mock.patch.object(TryFacts, "of", lambda self, job: None):
        asked_again = simulate(lines)
    assert remembered == asked_again


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_facts_under_reclaim_change_no_command_or_reason(lines: list[dict[str, Any]]) -> None:
    assert_as_when_every_rule_is_asked_again(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(look_alike_backlogs())
def test_facts_under_priority_preemption_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_rule_is_asked_again(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmenting_arrivals())
def test_facts_under_consolidation_change_no_command_or_reason(
    lines: list[dict[str, Any]],
) -> None:
    assert_as_when_every_rule_is_asked_again(lines)


def test_a_blocked_job_asks_each_fairness_rule_once_whether_it_applies() -> None:
    # Given a queue below its deserved quota whose job finds no room, while another queue,
    # within its own share, runs the whole cluster
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=4), queue("b", gpu_quota=4), node("n0", gpu=4))
    cluster.given(0, job("b1", "b", gpu=4))
    cluster.agents_obey()
    asked: Counter[str] = Counter()

    def counting(rule: type[Any]) -> Any:
        real = rule.applies

        def applies(self: Any, cycle: Any, job: Any) -> bool:
            asked[f"{rule.__name__}:{job.id}"] += 1
            return bool(real(self, cycle, job))

        return mock.patch.object(rule, "applies", applies)

    # When its job is submitted
    with counting(Reclaim), counting(ReclaimDeserved):
        cluster.when(1000, job("a1", "a", gpu=4))

    # Then it waits, and each fairness rule was asked once in its one try
    assert not [c for c in cluster.last if c.job == "a1"]
    assert asked == {"Reclaim:a1": 1, "ReclaimDeserved:a1": 1}


def test_a_fact_is_kept_until_something_lasting_changes_and_never_inside_a_checkpoint() -> None:
    # Given a pending job in a cycle, a rule whose answer changes from one asking to the
    # next, and victim searches that fail
    cluster = Cluster()
    cluster.given(0, queue("a", gpu_quota=4), node("n0", gpu=1))
    cluster.given(1, job("x", "a", gpu=4))
    session = Session(cluster.state, Plugins(), cluster.seq, 5)
    x, answers = cluster.state.jobs["x"], iter([True, False, True, False])
    rule = mock.Mock(spec=Reclaim)
    rule.applies.side_effect = lambda cycle, job: next(answers)
    searches = mock.patch.object(VictimSearch, "preempt_for", return_value=False)

    with searches as searched:
        # When asked twice with nothing lasting changed in between
        # Then the first answer serves, and a failed search is not made again
        assert session.rule_applies(rule, x) and session.rule_applies(rule, x)
        assert not session.preempt_for(x, rule) and not session.preempt_for(x, rule)
        assert searched.call_count == 1

        # When something lasting changes, then asked again: both are asked anew
        session.statement.set(x, "attempt", x.attempt + 1)
        assert session.rule_applies(rule, x) is False
        assert not session.preempt_for(x, rule)
        assert searched.call_count == 2

        # When asked inside a checkpoint: asked every time
        session.statement.checkpoint()
        assert session.rule_applies(rule, x) is True
        assert session.rule_applies(rule, x) is False
