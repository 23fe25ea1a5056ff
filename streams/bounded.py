"""Kafka transactions whose every wait has a bound, so a broker that never answers cannot wedge the scheduler (I/O shell).

aiokafka awaits its transactional requests without a deadline: AddOffsetsToTxn answered
CONCURRENT_TRANSACTIONS or COORDINATOR_LOAD_IN_PROGRESS, or a coordinator that keeps
moving, is retried for as long as it takes. Kafka's Java producer bounds the same calls by
`max.block.ms` (KAFKA-10309). Here a whole transaction, from begin to commit, gets
`TRANSACTION_BOUND_MS`, and its abort as long again; past either the transaction is
`TransactionStalled`. The caller then starts a new producer with the same transactional id
(a new epoch: the broker aborts whatever the stalled one left open) and reads the journal
back, as after any failed transaction (docs/kafka.md, "Failover").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaProducer

from streams.batch import is_fatal
from streams.kafka_io import REQUEST_TIMEOUT_MS, TRANSACTION_TIMEOUT_MS

__all__ = ["TRANSACTION_BOUND_MS", "TransactionStalled", "bounded_transaction", "stop_within"]

# Above REQUEST_TIMEOUT_MS, so a send that fails in its own time fails as itself; below
# TRANSACTION_TIMEOUT_MS, so the scheduler gives up on a transaction before the broker does.
TRANSACTION_BOUND_MS = (REQUEST_TIMEOUT_MS + TRANSACTION_TIMEOUT_MS) // 2


class TransactionStalled(Exception):
    """Kafka did not finish a transaction step within the bound; the producer must be replaced."""


@contextlib.asynccontextmanager
async def bounded_transaction(producer: AIOKafkaProducer, bound_s: float) -> AsyncIterator[None]:
    """`producer.transaction()` with a deadline over begin, the body and commit, and another
    over the abort that follows a failure. Past either it raises `TransactionStalled`."""
    deadline = asyncio.timeout(bound_s)
    try:
        async with deadline:
            await producer.begin_transaction()
            yield
            await producer.commit_transaction()
    except TimeoutError as exc:
        if not deadline.expired():
            await _abort(producer, bound_s)
            raise
        raise TransactionStalled(
            f"the transaction did not finish within {bound_s:g}s (begin, writes and commit)"
        ) from exc
    except BaseException:
        await _abort(producer, bound_s)
        raise


async def _abort(producer: AIOKafkaProducer, bound_s: float) -> None:
    if is_fatal(producer):  # nothing to abort: the producer's epoch is gone
        return
    try:
        await asyncio.wait_for(producer.abort_transaction(), bound_s)
    except TimeoutError as exc:
        raise TransactionStalled(f"the abort did not finish within {bound_s:g}s") from exc


async def stop_within(producer: AIOKafkaProducer, bound_s: float) -> None:
    """Stops a producer that may be stuck, giving up on a clean close after `bound_s`."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.stop(), bound_s)
