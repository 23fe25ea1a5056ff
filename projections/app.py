"""The projections process: a faust-streaming app folding the journal into the view, serving the API (I/O shell).

Two agents feed the pure view: one folds quotaflow.journal records, one checks
quotaflow.commands against the commands the fold emits. Both consume read_committed, so
aborted scheduler transactions are never seen (faust sets that isolation only in its
exactly-once mode, which KAFKA.md rules out, so the consumer thread sets it here).

Nothing relies on faust's offset commits or exactly-once: each process starts under a
fresh consumer group and reads both topics from offset 0, so the in-memory view is rebuilt
from the journal on every start, and the view skips any journal `seq` it has already
folded, so redelivery is harmless. An agent never raises (a faust agent that raises can
stop committing silently): a record that cannot be folded is counted in /health instead.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from typing import Any

import faust
import orjson
from faust.transport.drivers import aiokafka as faust_aiokafka

from domain.codec import DecodeError, decode_command, decode_journal
from projections.api import route
from projections.views import View
from streams.kafka_io import Topics

log = logging.getLogger(__name__)


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka reads this when the consumer starts (it is not started yet here).
        consumer._isolation_level = "read_committed"
        return consumer


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)


class _ReadCommittedTransport(faust_aiokafka.Transport):
    Consumer = _ReadCommittedConsumer


class ProjectionsApp(faust.App):
    """A faust App whose consumer reads read_committed without exactly-once mode."""

    def _new_transport(self) -> Any:
        return _ReadCommittedTransport(self.conf.broker_consumer, self)


def create_app(
    bootstrap: str,
    port: int = 8080,
    host: str = "127.0.0.1",
    topic_prefix: str = "",
    view: View | None = None,
) -> tuple[faust.App, View]:
    """The faust app and the view it keeps; run it with `faust.Worker(app).execute_from_commandline()`."""
    topics = Topics.for_prefix(topic_prefix)
    state = view if view is not None else View()
    app = ProjectionsApp(
        # A fresh group per process: the view is in memory, so it must be rebuilt from offset 0.
        f"quotaflow-projections-{uuid.uuid4().hex[:12]}",
        broker=f"kafka://{bootstrap}",
        web_enabled=True,
        web_port=port,
        web_bind=host,
        web_host=host,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        topic_allow_declare=False,  # the scheduler's topics exist; never create them here
        topic_disable_leader=True,
        key_serializer="raw",
        value_serializer="raw",
        store="memory://",
        # faust insists on a data directory; the view lives in memory, so a throwaway one
        # keeps the working directory clean.
        datadir=tempfile.mkdtemp(prefix="quotaflow-projections-"),
        web_in_thread=False,
    )
    journal = app.topic(topics.journal, key_type=bytes, value_type=bytes, value_serializer="raw")
    commands = app.topic(topics.commands, key_type=bytes, value_type=bytes, value_serializer="raw")

    def where(event: Any) -> str:
        message = event.message
        return f"{message.topic}:{message.partition}"

    @app.agent(journal, concurrency=1)
    async def fold_journal(stream: Any) -> None:
        async for event in stream.events():
            try:
                state.apply(decode_journal(event.value))
            except (DecodeError, ValueError, KeyError, TypeError) as exc:
                _record_error(state, f"journal {where(event)}@{event.message.offset}: {exc}")
            except Exception as exc:  # never let the agent die: the view would silently stop
                _record_error(
                    state,
                    f"journal {where(event)}@{event.message.offset}: {type(exc).__name__}: {exc}",
                )
            state.offsets[where(event)] = event.message.offset + 1

    @app.agent(commands, concurrency=1)
    async def check_commands(stream: Any) -> None:
        async for event in stream.events():
            try:
                state.observe_command(decode_command(event.value))
            except Exception as exc:
                _record_error(
                    state,
                    f"commands {where(event)}@{event.message.offset}: {type(exc).__name__}: {exc}",
                )
            state.offsets[where(event)] = event.message.offset + 1

    def page(path: str) -> None:
        async def get(self: Any, request: Any, **params: Any) -> Any:
            status, body = route(state, request.path, dict(request.query))
            return self.bytes(
                orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS),
                content_type="application/json",
                status=status,
            )

        get.__name__ = "projection_" + path.strip("/").replace("/", "_").replace("{", "").replace(
            "}", ""
        ).replace(":", "").replace(".", "_").replace("+", "")
        app.page(path)(get)

    for path in (
        "/queues",
        "/queues/{id}",
        "/jobs",
        "/jobs/{id:.+}",
        "/nodes",
        "/usage",
        "/health",
        "/openapi.json",
    ):
        page(path)
    return app, state


def _record_error(view: View, message: str) -> None:
    log.error("projection: %s", message)
    view.errors.append(message)
    del view.errors[:-100]


def run(bootstrap: str, port: int = 8080, host: str = "127.0.0.1", topic_prefix: str = "") -> int:
    """Runs the projections process until it is stopped (SIGINT / SIGTERM)."""
    app, _ = create_app(bootstrap, port=port, host=host, topic_prefix=topic_prefix)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    worker.execute_from_commandline()  # returns through SystemExit when stopped
    return 0
