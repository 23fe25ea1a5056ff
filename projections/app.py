"""The projections process: reads the journal and the commands from a checkpoint on, serves the API (I/O shell).

One aiokafka consumer, read_committed and in no consumer group, is assigned every partition
of quotaflow.journal and quotaflow.commands and positioned at the offsets stored in the
checkpoint (offset 0 without one). Records go one at a time through the `Projector`, which
never leaves a half-applied view; every `checkpoint_records` records or `checkpoint_s`
seconds the view and its offsets are written together to one local file (write a temporary
file, fsync, rename, fsync the directory), so a restart reads only the journal's tail. A
checkpoint that cannot be used (damaged, other code, other topics, offsets beyond the end of
the topics, a journal that does not continue it) is set aside and the view is rebuilt from
offset 0. docs/projections.md says why a local file and why not faust.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from domain.codec import decode_journal
from projections.checkpoint import CheckpointError, header, load
from projections.http_security import server_tls
from projections.projector import Projector
from projections.recent import Rejections, follow_rejections
from projections.view import View
from projections.web import application

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap: str
    journal: str  # topic names, prefix included
    commands: str
    port: int = 8080
    host: str = "127.0.0.1"
    checkpoint: Path | None = None  # None: no checkpoint, rebuild on every start
    checkpoint_records: int = 10_000
    checkpoint_s: float = 5.0
    # aiokafka's security keyword arguments (the command line builds them from its flags).
    kafka_options: dict[str, Any] = field(default_factory=dict)
    token: str | None = None  # bearer token required for everything but /health
    tls_cert: Path | None = None  # serve HTTPS with this certificate chain and key (PEM)
    tls_key: Path | None = None
    rejected: str | None = None  # quotaflow.rejected: its tail feeds /rejections and the page


def code_fingerprint() -> str:
    """A digest of the code that shapes a view: a checkpoint from other code is rebuilt."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
    for package in ("domain", "projections"):
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def write_atomically(path: Path, data: bytes) -> None:
    """Replaces `path` with `data` so that a crash leaves the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Process:
    """The running projections: consumer, projector, checkpoint file and web server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.code = code_fingerprint()
        self.topics = (settings.journal, settings.commands)
        self.projector = Projector(code=self.code, topics=self.topics)
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: list[TopicPartition] = []
        self.expect_seq: int | None = None  # after a resume: the seq the journal must go on with
        self.written = 0
        self.dump_s = 0.0  # how long the last checkpoint took to serialize
        self.stopping = asyncio.Event()
        self.rejections = Rejections()
        self.instance = uuid.uuid4().hex[:12]
        self.started_s = time.time()
        self.last_record_s: float | None = None  # wall time the last record was read
        self.lag: int | None = None  # records on the topics not yet read (refreshed on demand)

    # -- start: load the checkpoint, position the consumer -------------------------------

    def _load_checkpoint(self) -> None:
        path = self.settings.checkpoint
        process: dict[str, Any] = {
            "checkpoint": None
            if path is None
            else {"path": str(path), "written": 0, "seq": None, "offsets": None},
            "resumed_from": None,
        }
        if path is not None and path.exists():
            try:
                data = path.read_bytes()
                restored = load(data, code=self.code, topics=self.topics)
            except (OSError, CheckpointError) as exc:
                self._set_aside(path, f"checkpoint {path} not used ({exc}): rebuilding")
                process["rebuilt_because"] = str(exc)
            else:
                view = restored.view
                self.projector = Projector(view, code=self.code, topics=self.topics, saved=data)
                process["resumed_from"] = {"seq": view.state.seq, "offsets": dict(view.offsets)}
                process["checkpoint"] |= {"seq": view.state.seq, "offsets": dict(view.offsets)}
                self.expect_seq = view.state.seq + 1 if view.records else None
                log.warning("projections resume from %s at journal seq %d", path, view.state.seq)
        self.projector.view.process = process

    def _set_aside(self, path: Path, message: str) -> None:
        log.warning("projections: %s", message)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".unusable"))

    def _rebuild(self, reason: str) -> None:
        """Drops a restored view that the journal does not continue; reading restarts at 0."""
        if self.settings.checkpoint is not None:
            self._set_aside(self.settings.checkpoint, f"{reason}: rebuilding from offset 0")
        process = self.projector.view.process
        self.projector = Projector(code=self.code, topics=self.topics)
        process["resumed_from"] = None
        process["rebuilt_because"] = reason
        self.projector.view.process = process
        self.expect_seq = None

    async def _partitions(self) -> list[TopicPartition]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.settings.bootstrap, **self.settings.kafka_options
        )
        await admin.start()
        try:
            while True:
                described = await admin.describe_topics(list(self.topics))
                found = {
                    entry["topic"]: [p["partition"] for p in entry["partitions"]]
                    for entry in described
                    if entry["error_code"] == 0 and entry["partitions"]
                }
                missing = [topic for topic in self.topics if topic not in found]
                if not missing:
                    return sorted(TopicPartition(t, p) for t in self.topics for p in found[t])
                if loop.time() > deadline:
                    raise RuntimeError(f"topics not found on the broker: {', '.join(missing)}")
                await asyncio.sleep(0.5)
        finally:
            await admin.close()

    async def _position(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        ends = await consumer.end_offsets(self.partitions)
        offsets = self.projector.view.offsets
        beyond = [
            f"{tp.topic}:{tp.partition}"
            for tp in self.partitions
            if offsets.get(f"{tp.topic}:{tp.partition}", 0) > ends[tp]
        ]
        if beyond:
            self._rebuild(f"checkpoint offsets beyond the end of {', '.join(beyond)}")
            offsets = self.projector.view.offsets
        for tp in self.partitions:
            consumer.seek(tp, offsets.get(f"{tp.topic}:{tp.partition}", 0))

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        self._load_checkpoint()
        consumer = self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            **self.settings.kafka_options,
            group_id=None,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        runner = web.AppRunner(application(self, token=self.settings.token), access_log=None)
        follower: asyncio.Task[None] | None = None
        try:
            self.partitions = await self._partitions()
            consumer.assign(self.partitions)
            await self._position()
            await runner.setup()
            tls = server_tls(self.settings.tls_cert, self.settings.tls_key)
            await web.TCPSite(
                runner, self.settings.host, self.settings.port, ssl_context=tls
            ).start()
            log.warning(
                "projections serving on %s://%s:%d",
                "https" if tls else "http",
                self.settings.host,
                self.settings.port,
            )
            if self.settings.rejected is not None:
                follower = asyncio.create_task(
                    follow_rejections(
                        self.settings.bootstrap,
                        self.settings.rejected,
                        self.rejections,
                        self.stopping,
                        self.settings.kafka_options,
                    )
                )
            await self._consume()
        finally:
            if follower is not None:
                follower.cancel()
                await asyncio.gather(follower, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self._checkpoint()
            await runner.cleanup()
            await consumer.stop()

    async def _consume(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        loop = asyncio.get_running_loop()
        last_checkpoint = loop.time()
        while not self.stopping.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=500)
            if batch:
                self.last_record_s = time.time()
            restart = False
            for tp in sorted(batch):
                where = f"{tp.topic}:{tp.partition}"
                for record in batch[tp]:
                    if tp.topic == self.settings.journal:
                        if self.expect_seq is not None and not self._continues(record.value):
                            restart = True
                            break
                        self.projector.journal(where, record.offset, record.value)
                    else:
                        self.projector.command(where, record.offset, record.value)
                if restart:
                    break
            if restart:
                await self._position()
                continue
            if self.projector.view.state.group_open and await self._journal_at_end():
                self.projector.settle()
            unsaved, since = self.projector.unsaved, loop.time() - last_checkpoint
            # Taking a checkpoint stops the fold while the view is serialized: waiting ten
            # times as long as the last one took keeps that under a tenth of the time, also
            # while a big view catches up with a long journal.
            due = (
                unsaved >= self.settings.checkpoint_records
                or (unsaved and since >= self.settings.checkpoint_s)
            ) and since >= 10 * self.dump_s
            if due:
                await self._checkpoint()
                last_checkpoint = loop.time()

    async def _journal_at_end(self) -> bool:
        """Whether every committed journal record has been read (position at the last stable
        offset): then the last batch read is whole."""
        consumer = self.consumer
        assert consumer is not None
        for tp in self.partitions:
            if tp.topic != self.settings.journal:
                continue
            stable = consumer.last_stable_offset(tp)
            if stable is None or await consumer.position(tp) < stable:
                return False
        return True

    def _continues(self, value: bytes) -> bool:
        """Whether the first journal record after a resume is the one the checkpoint expects."""
        expected, self.expect_seq = self.expect_seq, None
        try:
            seq = decode_journal(value).seq
        except Exception:
            return True  # the projector reports it; it says nothing about the checkpoint
        if seq == expected:
            return True
        self._rebuild(f"the journal goes on at seq {seq}, the checkpoint expects {expected}")
        return False

    async def _checkpoint(self) -> None:
        path = self.settings.checkpoint
        if path is None or not self.projector.unsaved:
            return
        started = time.perf_counter()
        data = self.projector.checkpoint()
        self.dump_s = time.perf_counter() - started
        process = self.projector.view.process
        try:
            await asyncio.to_thread(write_atomically, path, data)
        except OSError as exc:
            if process["checkpoint"].get("last_error") != str(exc):  # once, not every interval
                log.error("projections: cannot write checkpoint %s: %s", path, exc)
            process["checkpoint"]["last_error"] = str(exc)
            return
        process["checkpoint"].pop("last_error", None)
        self.written += 1
        head = header(data)
        process["checkpoint"] |= {
            "written": self.written,
            "seq": head["seq"],
            "offsets": head["offsets"],
            "bytes": len(data),
        }

    # -- liveness and the rejections' tail ------------------------------------------------------

    async def refresh_lag(self) -> None:
        """Records on the journal and commands topics not yet read: high water minus position."""
        consumer = self.consumer
        if consumer is None:
            return
        lag = 0
        try:
            for tp in self.partitions:
                high = consumer.highwater(tp)
                if high is None:
                    return  # nothing fetched yet: unknown, not zero
                lag += max(0, high - await consumer.position(tp))
        except Exception:
            return
        self.lag = lag

    @property
    def view(self) -> View:
        return self.projector.view

    def read_since_start(self) -> dict[str, int]:
        return {"journal": self.projector.journal_fed, "all": self.projector.fed}

    def liveness(self) -> dict[str, Any]:
        view = self.projector.view
        return {
            "component": "projections",
            "instance": self.instance,
            "started_s": self.started_s,
            "last_record_s": self.last_record_s,
            "lag": self.lag,
            "journal_seq": view.state.seq,
            "journal_ts": view.state.ts,
            "now_s": time.time(),
        }


def run(settings: Settings) -> int:
    """Runs the projections process until SIGINT / SIGTERM (a last checkpoint is written then)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")

    async def main() -> None:
        process = Process(settings)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, process.stopping.set)
        await process.run()

    asyncio.run(main())
    return 0
