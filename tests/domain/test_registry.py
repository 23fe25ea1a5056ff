"""The registry: a policy is one module and one registry line, and everything that knows
policies (validation, the cycle, the pending view) derives from it (given / when / then)."""

from __future__ import annotations

import pytest

from domain.codec import DecodeError, decode_timed
from domain.cycle.framework import CycleView, Verdict
from domain.events import QueueConfigured
from domain.pending import Standing
from domain.plugins import QUEUE_POLICIES, Plugins, validation_context
from domain.reasons import ReasonKind
from domain.state import Job, Queue
from tests.domain.harness import Cluster, job, node


class Patient:
    """A toy policy (a module of its own in real life): a blocked job never holds up the jobs
    behind it, and the pending view says so in the policy's own words."""

    kind = "patient"
    walk_settles = False  # True would let Allocate step only a first job per shape when settled
    ages = False  # effective_priority is the job's own priority

    def effective_priority(self, job: Job, queue: Queue, now: int) -> int:
        return job.priority

    def on_blocked(self, job: Job, queue: Queue, cycle: CycleView) -> Verdict:
        return Verdict.SKIP

    def skips_in(self, job: Job, queue: Queue, now: int) -> float | None:
        return None

    def blocking(self, job: Job, queue: Queue, skip_in_s: float | None) -> str:
        return "blocked, and patient never stops its queue"

    def skipping(self, job: Job, queue: Queue) -> str:
        return "blocked, so the patient queue lets the next job go first"


# The one registry line (in domain/plugins.py it would be one more name in _by_kind(...)).
WITH_PATIENT = Plugins(queue_policies={**QUEUE_POLICIES, Patient.kind: Patient()})


def patient_queue(plugins: Plugins) -> QueueConfigured:
    body = {
        "type": "QueueConfigured",
        "queue": "q",
        "resources": {"gpu": {"quota": 4, "limit": -1}},
        "policy": {"kind": "patient"},
    }
    return QueueConfigured.model_validate(body, context=validation_context(plugins))


def test_a_registered_toy_policy_is_validated_scheduled_and_explained() -> None:
    cluster = Cluster(WITH_PATIENT)
    cluster.given(0, patient_queue(WITH_PATIENT), node("n1", gpu=4))
    cluster.given(1, job("filler", "q", gpu=3))
    cluster.when(2, job("head", "q", gpu=2), job("small", "q", gpu=1))
    assert cluster.dispatched() == ["small"]  # the blocked head did not stop the queue
    [entry] = cluster.pending("q")
    assert (entry.job, entry.standing, entry.reason.kind) == (
        "head",
        Standing.SKIPPED,
        ReasonKind.CAPACITY,
    )
    assert entry.reason.text.startswith(
        "blocked, so the patient queue lets the next job go first: "
    )


def test_a_policy_that_is_not_registered_is_refused_with_the_registered_names() -> None:
    line = '{"type": "QueueConfigured", "ts": 0, "queue": "q", "policy": {"kind": "patient"}}'
    with pytest.raises(DecodeError, match=r"policy\.kind: Input should be 'fifo', 'round_robin'"):
        decode_timed(line)
    cluster = Cluster()  # the product's registry: the journal never sees the toy's name
    cluster.given(0, patient_queue(WITH_PATIENT))
    [(_, reason)] = cluster.rejections
    assert reason.startswith("policy.kind: 'patient' is not a registered queue policy")
