"""The projections process as a faust App: its worker runs the journal reader, the checkpoint timer and the HTTP server (I/O shell).

faust-streaming is the runtime: `faust.Worker` owns the event loop, the signal handling and
the start and stop of every part, in order. The parts:

- `JournalReading`, an `app.service`: the reader (projections/reader.py), one aiokafka
  consumer positioned at the checkpoint's offsets, applying one batch after another; on
  stop it finishes its batch and writes a last checkpoint. A second task follows the tail of
  quotaflow.rejected for the dashboard.
- a faust timer, `app.timer`: a checkpoint once `--checkpoint-interval` seconds have passed
  with records unsaved (the reader takes one after `--checkpoint-records` records).
- `WebServer`, the App's `app.web_server`: the aiohttp application of projections/web.py
  (API, /metrics, dashboard; bearer token and TLS), serving once the reader is positioned.

The App's own Kafka consumer and producer stay off: faust agents position partitions from a
consumer group's committed offsets, while this view resumes from its own checkpoint and
must know exactly when every committed journal record has been applied
(docs/projections.md, "The runtime").
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import tempfile
from contextlib import suppress
from typing import Any

import faust
from aiohttp import web
from faust.app import BootStrategy
from mode import Service

from projections.http_security import server_tls
from projections.process import Process, Settings
from projections.reader import Reader
from projections.recent import follow_rejections
from projections.web import application

__all__ = ["JournalReading", "ProjectionsApp", "Settings", "WebServer", "create_app", "run"]

log = logging.getLogger(__name__)


class _Boot(BootStrategy):
    # No faust consumer, producer, conductor or tables: no agent reads a topic here.
    enable_kafka = False


class ProjectionsApp(faust.App):
    """A faust App whose worker starts services, timers and the web server, not Kafka clients."""

    BootStrategy = _Boot


class JournalReading(Service):
    """The reader's lifecycle: started by the App, reads until the worker stops, then a last checkpoint."""

    wait_for_shutdown = True  # stop() waits for the batch being applied to finish

    def __init__(self, process: Process, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.process = process
        self.reader = Reader(process)
        self.stopping = asyncio.Event()  # tells the rejections' tail to stop

    @Service.task
    async def _read_journal(self) -> None:
        try:
            await self.reader.start()
            while not self.should_stop:
                await self.reader.read()
                if self.process.checkpoint_due(by_records_only=True):
                    await self.process.checkpoint()
        except Exception as exc:
            # Without the journal the process has nothing to serve: the worker stops every
            # part in order, as on SIGTERM, and `run` raises this for the CLI to report.
            self.process.failure = exc
            signal.raise_signal(signal.SIGTERM)
        finally:
            self.set_shutdown()

    @Service.task
    async def _follow_rejections(self) -> None:
        settings = self.process.settings
        if settings.rejected is not None:
            await follow_rejections(
                settings.bootstrap,
                settings.rejected,
                self.process.rejections,
                self.stopping,
                settings.kafka_options,
            )

    async def on_stop(self) -> None:
        self.stopping.set()

    async def on_shutdown(self) -> None:
        with suppress(Exception):
            await self.process.checkpoint()
        await self.reader.stop()


class WebServer(Service):
    """The HTTP server (projections/web.py's routes) on --host/--port, HTTPS with --tls-cert."""

    def __init__(self, process: Process, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.process = process
        settings = process.settings
        self.tls = server_tls(settings.tls_cert, settings.tls_key)
        scheme = "https" if self.tls else "http"
        self.web_url = f"{scheme}://{settings.host}:{settings.port}"
        self.runner = web.AppRunner(application(process, token=settings.token), access_log=None)

    @Service.task
    async def _serve(self) -> None:
        # Only once the reader has positioned: a restored view the topics do not continue
        # (offsets beyond their end) is dropped before anyone can be answered from it.
        await self.process.positioned.wait()
        settings = self.process.settings
        await self.runner.setup()
        site = web.TCPSite(self.runner, settings.host, settings.port, ssl_context=self.tls)
        await site.start()
        if settings.port == 0:  # any free port: say which one was taken
            port = self.runner.addresses[0][1]
            self.web_url = f"{self.web_url.rpartition(':')[0]}:{port}"
        log.warning("projections serving on %s", self.web_url)

    async def on_stop(self) -> None:
        await self.runner.cleanup()


def create_app(process: Process, datadir: str) -> faust.App:
    """The faust App of one projections process (the checkpoint already loaded)."""
    settings = process.settings
    app = ProjectionsApp(
        "quotaflow-projections",  # never used on Kafka: the App's Kafka clients are off
        broker=f"kafka://{settings.bootstrap}",
        autodiscover=False,
        datadir=datadir,
        web_enabled=True,  # served by WebServer below, on --host/--port (0: any free port)
    )

    # faust builds each service itself (with its loop and beacon): these bind the process.
    @app.service
    class Reading(JournalReading):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(process, **kwargs)

    @app.web_server
    class Web(WebServer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(process, **kwargs)

    # Checked four times per interval (0.1 s to 1 s apart), so a checkpoint follows it closely.
    interval = min(1.0, max(0.1, settings.checkpoint_s / 4))

    async def checkpoint_when_due() -> None:
        if process.checkpoint_due():
            await process.checkpoint()

    app.timer(interval)(checkpoint_when_due)

    return app


def run(settings: Settings) -> int:
    """Runs the projections process until SIGINT / SIGTERM (a last checkpoint is written then)."""
    process = Process(settings)
    process.load_checkpoint()
    # faust wants a data directory for tables; this App has none, so a throwaway one keeps
    # the working directory clean.
    datadir = tempfile.mkdtemp(prefix="quotaflow-projections-")
    try:
        worker = faust.Worker(
            create_app(process, datadir), loglevel="WARNING", quiet=True, redirect_stdouts=False
        )
        worker.spinner = None  # no terminal progress spinner in a service's log
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:
            code = 0
    finally:
        shutil.rmtree(datadir, ignore_errors=True)
    if process.failure is not None:
        raise process.failure
    return code
