"""Producing inputs and waiting for the scheduler's verdict on each, matched by topic/partition/offset (I/O shell).

Before producing, the waiter positions a read_committed consumer at the end of the journal
and of quotaflow.rejected; it then knows the exact partition and offset of each input it
sent. The sequencer names the input of every journal record in the record's
`quotaflow.source` header, and every rejection carries `topic`, `partition` and `offset`, so
each input is matched exactly, never by guessing from its content.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from cli.common import EXIT_ERROR, SEND_TIMEOUT_S, CliError

SOURCE_HEADER = "quotaflow.source"  # streams.records.SOURCE_HEADER
DEFAULT_WAIT_S = 5.0
EXIT_REJECTED = EXIT_ERROR
EXIT_NO_VERDICT = 4

InputKey = tuple[str, int, int]  # topic, partition, offset


@dataclass(frozen=True)
class Verdict:
    """What the scheduler did with one input: journaled (seq), rejected (reason), or nothing yet."""

    key: InputKey
    outcome: str  # "accepted", "rejected", "unanswered", or "sent" when not waited for
    seq: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        topic, partition, offset = self.key
        out: dict[str, Any] = {
            "outcome": self.outcome,
            "topic": topic,
            "partition": partition,
            "offset": offset,
        }
        if self.seq is not None:
            out["seq"] = self.seq
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def journal_source(headers: Any) -> InputKey | None:
    """The input a journal record journals, from its header (None for Ticks and older records)."""
    for name, value in headers or ():
        if name == SOURCE_HEADER:
            try:
                where = orjson.loads(value)
                return (str(where["topic"]), int(where["partition"]), int(where["offset"]))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                return None
    return None


def rejection_source(body: Any) -> InputKey | None:
    if not isinstance(body, dict):
        return None
    try:
        return (str(body["topic"]), int(body["partition"]), int(body["offset"]))
    except (KeyError, TypeError, ValueError):
        return None


async def send_and_wait(
    bootstrap: str,
    topic: str,
    messages: list[tuple[str, bytes]],
    *,
    journal: str,
    rejected: str,
    wait_s: float | None,
) -> list[Verdict]:
    """Produces the messages; with wait_s, waits that long for every verdict (None: no waiting)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    from streams.kafka_io import idempotent_producer, read_committed_consumer

    # The shell's client factories: whatever client settings they apply apply here too.
    consumer: AIOKafkaConsumer | None = None
    if wait_s is not None:
        consumer = read_committed_consumer(bootstrap)
    producer = idempotent_producer(bootstrap, request_timeout_ms=int(SEND_TIMEOUT_S * 1000))
    try:
        await asyncio.wait_for(producer.start(), SEND_TIMEOUT_S)
        partitions = await asyncio.wait_for(producer.partitions_for(topic), SEND_TIMEOUT_S)
        if not partitions:
            raise CliError(
                f"topic {topic} does not exist on {bootstrap} (create it: quotaflow kafka topics)"
            )
        if consumer is not None:
            try:
                await asyncio.wait_for(consumer.start(), SEND_TIMEOUT_S)
                answers = []
                for name in (journal, rejected):
                    numbers = await asyncio.wait_for(producer.partitions_for(name), SEND_TIMEOUT_S)
                    answers += [TopicPartition(name, p) for p in sorted(numbers or ())]
                consumer.assign(answers)
                # Ends taken before producing: any answer to what is sent next lies beyond them.
                ends = await asyncio.wait_for(consumer.end_offsets(answers), SEND_TIMEOUT_S)
                for tp, end in ends.items():
                    consumer.seek(tp, end)
            except TopicAuthorizationFailedError:
                # A secured producer may write its jobs but not read the journal (it would see
                # every team's jobs): it sends without a verdict and says so.
                await consumer.stop()
                consumer = None
                print(
                    f"quotaflow: not waiting for the scheduler's verdict: this user may not read "
                    f"{journal} or {rejected} (docs/kafka.md, Production security)",
                    file=sys.stderr,
                )
        sent: list[InputKey] = []
        for key, value in messages:
            meta = await asyncio.wait_for(
                producer.send_and_wait(topic, value, key=key.encode()), SEND_TIMEOUT_S
            )
            sent.append((meta.topic, meta.partition, meta.offset))
    except ClusterAuthorizationFailedError:
        # An idempotent producer asks for a producer id first, which needs Write on some topic.
        from streams.kafka_io import current_security

        raise CliError(
            f"not authorized: Kafka refused user {current_security().username!r} any write, so "
            f"also to topic {topic} (its role does not allow it; docs/kafka.md, Production "
            "security)"
        ) from None
    except TimeoutError:
        raise CliError(
            f"no answer from Kafka at {bootstrap} about topic {topic} within {SEND_TIMEOUT_S:.0f}s "
            "(does the topic exist? quotaflow kafka topics creates it)"
        ) from None
    finally:
        await producer.stop()
    try:
        if consumer is None or wait_s is None:
            return [Verdict(key, "sent") for key in sent]
        return await _collect(consumer, sent, journal, wait_s)
    finally:
        if consumer is not None:
            await consumer.stop()


async def _collect(
    consumer: Any, sent: list[InputKey], journal: str, wait_s: float
) -> list[Verdict]:
    found: dict[InputKey, Verdict] = {}
    wanted = set(sent)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while wanted - found.keys():
        left = deadline - loop.time()
        if left <= 0:
            break
        batch = await consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000) or 1)
        for tp, records in batch.items():
            for record in records:
                if tp.topic == journal:
                    source = journal_source(record.headers)
                    if source in wanted:
                        seq = _seq(record.value)
                        found[source] = Verdict(source, "accepted", seq=seq)
                else:
                    try:
                        body = orjson.loads(record.value or b"")
                    except orjson.JSONDecodeError:
                        continue
                    source = rejection_source(body)
                    if source in wanted:
                        found[source] = Verdict(source, "rejected", reason=str(body.get("reason")))
    return [found.get(key) or Verdict(key, "unanswered") for key in sent]


def _seq(raw: bytes | None) -> int | None:
    try:
        seq = orjson.loads(raw or b"").get("seq")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


def no_verdict_message(count: int, wait_s: float) -> str:
    what = "the input" if count == 1 else f"{count} inputs"
    return (
        f"no scheduler answered within {wait_s:g}s about {what}: it may be down or far behind "
        "(`quotaflow status` shows its liveness; the input stays queued and will be decided "
        "when it runs; --wait S waits longer, --no-wait does not wait)"
    )


def exit_code(verdicts: list[Verdict]) -> int:
    """0 when all were journaled (or not waited for), 1 on any rejection, 4 when any is unanswered."""
    if any(v.outcome == "rejected" for v in verdicts):
        return EXIT_REJECTED
    if any(v.outcome == "unanswered" for v in verdicts):
        return EXIT_NO_VERDICT
    return 0


def add_wait_options(parser: Any) -> None:
    """--wait S, --no-wait and --json on a command that produces inputs."""
    parser.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds to wait for the scheduler's verdict (default: $QUOTAFLOW_WAIT_S, "
        f"the config file, else {DEFAULT_WAIT_S:g})",
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="send and return at once, without a verdict"
    )
    parser.add_argument("--json", action="store_true", help="print each outcome as a JSON line")


def deliver(
    args: Any, logical_topic: str, messages: list[tuple[str, bytes]], labels: list[str]
) -> int:
    """Sends the messages, prints each one's outcome (label: accepted / rejected: reason), returns the exit code."""
    import sys

    from cli.common import resolve_bootstrap, topic_name
    from cli.config import wait_default
    from streams import topics

    wait_s: float | None = None
    if not args.no_wait:
        wait_s = args.wait if args.wait is not None else wait_default(DEFAULT_WAIT_S)
        if not wait_s > 0:
            raise CliError(f"--wait {args.wait}: must be > 0 (or use --no-wait)", 2)
    prefix = args.topic_prefix
    verdicts = asyncio.run(
        send_and_wait(
            resolve_bootstrap(args.bootstrap),
            topic_name(prefix, logical_topic),
            messages,
            journal=topic_name(prefix, topics.JOURNAL),
            rejected=topic_name(prefix, topics.REJECTED),
            wait_s=wait_s,
        )
    )
    for label, verdict in zip(labels, verdicts, strict=True):
        if args.json:
            line = {"input": label, **verdict.to_json()}
            sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
        elif verdict.outcome == "accepted":
            print(f"{label}: accepted (journal seq {verdict.seq})")
        elif verdict.outcome == "sent":
            print(f"{label}: sent (not waiting for the scheduler)")
        elif verdict.outcome == "rejected":
            print(f"quotaflow: {label}: rejected: {verdict.reason}", file=sys.stderr)
    sys.stdout.flush()
    unanswered = sum(1 for v in verdicts if v.outcome == "unanswered")
    if unanswered and wait_s is not None:
        print(f"quotaflow: {no_verdict_message(unanswered, wait_s)}", file=sys.stderr)
    return exit_code(verdicts)


def check(logical_topic: str, body: dict[str, Any], what: str) -> None:
    """The scheduler's own decoding, run before sending: a malformed input never leaves."""
    from cli.common import EXIT_USAGE, validate
    from domain.codec import DecodeError

    try:
        validate(logical_topic, body)
    except DecodeError as exc:
        raise CliError(f"{what}: {exc}", EXIT_USAGE) from None
