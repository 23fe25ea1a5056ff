"""Kafka transactions whose every wait has a bound, so a broker that never answers cannot wedge the scheduler (I/O shell).

aiokafka awaits its transactional requests without a deadline: AddOffsetsToTxn answered
CONCURRENT_TRANSACTIONS or COORDINATOR_LOAD_IN_PROGRESS, or a coordinator that keeps
moving, is retried for as long as it takes (and an idempotent producer's sends too). Kafka's
Java producer bounds the same calls by `max.block.ms` (KAFKA-10309). Here a transaction, from
begin to commit, gets `TRANSACTION_BOUND_MS` of waiting on Kafka (the body renews the
`Deadline` after the core's own work, a cycle), and its abort as long again; past either the
transaction is `TransactionStalled`. The caller then starts a new producer with the same
transactional id (a new epoch: the broker aborts whatever the stalled one left open) and
reads the journal back, as after any failed transaction (docs/scheduler.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaProducer

from streams.batch import is_fatal
from streams.kafka_io import REQUEST_TIMEOUT_MS, TRANSACTION_TIMEOUT_MS
from streams.records import PRODUCER_STATE_ERRORS

__all__ = [
    "NEEDS_NEW_EPOCH",
    "TRANSACTION_BOUND_MS",
    "Deadline",
    "TransactionStalled",
    "bounded_transaction",
    "stop_within",
]

# Above REQUEST_TIMEOUT_MS, so a send that fails in its own time fails as itself; below
# TRANSACTION_TIMEOUT_MS, so the scheduler gives up on a transaction before the broker does.
TRANSACTION_BOUND_MS = (REQUEST_TIMEOUT_MS + TRANSACTION_TIMEOUT_MS) // 2


class TransactionStalled(Exception):
    """Kafka did not finish a transaction step within the bound; the producer must be replaced."""


# Failures after which only a new producer epoch goes on: the producer's sequence state
# disagrees with the broker's, or its transaction was given up in an unknown state.
NEEDS_NEW_EPOCH = (*PRODUCER_STATE_ERRORS, TransactionStalled)


class Deadline:
    """The deadline over a transaction's Kafka waits; `renew` after work of the core's own
    (a cycle may take seconds) so that only waiting on Kafka counts against it."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._timeout: asyncio.Timeout | None = None

    def renew(self) -> None:
        if self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(asyncio.get_running_loop().time() + self.bound_s)


@contextlib.asynccontextmanager
async def bounded_transaction(
    producer: AIOKafkaProducer, bound_s: float
) -> AsyncIterator[Deadline]:
    """`producer.transaction()` with a deadline over begin, the body and commit (which the
    body may `renew`), and another over the abort that follows a failure of the body (as
    aiokafka's, only then). Past either it raises `TransactionStalled`, and nothing more is
    asked of the producer."""
    deadline = Deadline(bound_s)
    async with _within(deadline, "begin"):
        await producer.begin_transaction()
    try:
        async with _within(deadline, "its writes"):
            yield deadline
    except TransactionStalled:
        raise
    except BaseException:
        if not is_fatal(producer):  # else nothing to abort: the producer's epoch is gone
            async with _within(Deadline(bound_s), "the abort"):
                await producer.abort_transaction()
        raise
    async with _within(deadline, "the commit"):
        await producer.commit_transaction()


@contextlib.asynccontextmanager
async def _within(deadline: Deadline, what: str) -> AsyncIterator[None]:
    """The deadline over one step: as renewed last, or `bound_s` from now the first time."""
    timeout = deadline._timeout
    when = (
        timeout.when()
        if timeout is not None
        else asyncio.get_running_loop().time() + deadline.bound_s
    )
    step = deadline._timeout = asyncio.timeout_at(when)
    try:
        async with step:
            yield
    except TimeoutError as exc:
        if step.expired():
            raise TransactionStalled(f"the transaction stalled: no end to {what} in time") from exc
        raise


async def stop_within(producer: AIOKafkaProducer, bound_s: float) -> None:
    """Stops a producer that may be stuck, giving up on a clean close after `bound_s`."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.stop(), bound_s)
