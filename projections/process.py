"""The projections process's state: the projector, its checkpoint file (load, set aside, write atomically), liveness (I/O shell).

The view and the offsets it reflects are written together to one local file: a temporary
file, fsync, rename, fsync the directory, so a crash leaves the old checkpoint or the new
one. A checkpoint that cannot be used (damaged, other code, other topics) is set aside as
`FILE.unusable` and the view rebuilt from offset 0; so is one the journal does not continue
(projections/reader.py finds out). docs/projections.md says why a local file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.checkpoint import CheckpointError, header, load
from projections.projector import Projector
from projections.recent import Rejections
from projections.view import View

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
    """What the running projections share: the projector, the checkpoint file, liveness.

    The reader (projections/reader.py) feeds the projector, the web server reads the view,
    and both the reader and a faust timer (projections/app.py) take checkpoints through
    `checkpoint_due` and `checkpoint`. All of them run in one event loop and the projector
    applies each record synchronously, so every checkpoint is a cut between two records.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.code = code_fingerprint()
        self.topics = (settings.journal, settings.commands)
        self.projector = Projector(code=self.code, topics=self.topics)
        self.expect_seq: int | None = None  # after a resume: the seq the journal must go on with
        self.written = 0
        self.dump_s = 0.0  # how long the last checkpoint took to serialize
        self.last_checkpoint_s = time.monotonic()
        self._writing = asyncio.Lock()  # one checkpoint at a time, written in order
        self.rejections = Rejections()
        self.instance = uuid.uuid4().hex[:12]
        self.started_s = time.time()
        self.last_record_s: float | None = None  # wall time the last record was read
        self.lag: int | None = None  # records on the topics not yet read (refreshed on demand)
        self.lag_probe: Callable[[], Awaitable[int | None]] | None = None  # set by the reader
        self.failure: Exception | None = None  # why the reader stopped, if it did on its own
        self.positioned = (
            asyncio.Event()
        )  # the reader has checked the checkpoint against the topics

    # -- start: the checkpoint file -------------------------------------------------------

    def load_checkpoint(self) -> None:
        """Restores the view from the checkpoint file, or sets an unusable file aside."""
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

    def rebuild(self, reason: str) -> None:
        """Drops a restored view that the journal does not continue; reading restarts at 0."""
        if self.settings.checkpoint is not None:
            self._set_aside(self.settings.checkpoint, f"{reason}: rebuilding from offset 0")
        process = self.projector.view.process
        self.projector = Projector(code=self.code, topics=self.topics)
        process["resumed_from"] = None
        process["rebuilt_because"] = reason
        self.projector.view.process = process
        self.expect_seq = None

    # -- checkpoints ----------------------------------------------------------------------

    def checkpoint_due(self, *, by_records_only: bool = False) -> bool:
        """After `checkpoint_records` records, or `checkpoint_s` seconds when anything was read.

        The reader asks after each batch about the records (`by_records_only`), the App's
        timer about both. Taking a checkpoint stops the fold while the view is serialized:
        waiting ten times as long as the last one took keeps that under a tenth of the time,
        also while a big view catches up with a long journal.
        """
        if self.settings.checkpoint is None:
            return False
        unsaved = self.projector.unsaved
        since = time.monotonic() - self.last_checkpoint_s
        wanted = unsaved >= self.settings.checkpoint_records or (
            not by_records_only and unsaved > 0 and since >= self.settings.checkpoint_s
        )
        return wanted and since >= 10 * self.dump_s

    async def checkpoint(self) -> None:
        """Serializes the view and its offsets now (one cut) and writes them from a thread."""
        path = self.settings.checkpoint
        if path is None:
            return
        async with self._writing:
            if not self.projector.unsaved:
                return
            started = time.perf_counter()
            data = self.projector.checkpoint()
            self.dump_s = time.perf_counter() - started
            self.last_checkpoint_s = time.monotonic()
            process = self.projector.view.process
            try:
                await asyncio.to_thread(write_atomically, path, data)
            except OSError as exc:
                if process["checkpoint"].get("last_error") != str(exc):  # once, not every time
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

    # -- what the web server reads --------------------------------------------------------

    @property
    def view(self) -> View:
        return self.projector.view

    async def refresh_lag(self) -> None:
        """Records on the journal and commands topics not yet read (unknown until fetched)."""
        if self.lag_probe is not None:
            lag = await self.lag_probe()
            if lag is not None:
                self.lag = lag

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
