"""Feeds journal and command records into the served view, all or nothing per record, and takes checkpoints (pure).

The core's fold mutates its State in place, so a record whose fold raises halfway leaves a
view nobody should see. The projector keeps the last checkpoint's bytes and every record
applied since; when a record fails, it restores the checkpoint, re-applies those records
(the fold is deterministic, so they give exactly the view from before the failure) and
skips the failed one, recording why. All of this is synchronous: in the single-threaded
process, nothing can read the view between the failure and its repair.
"""

from __future__ import annotations

from domain.codec import decode_command, decode_journal
from domain.plugins import DEFAULT_PLUGINS, Plugins
from projections.checkpoint import dump, load
from projections.view import View

MAX_ERRORS = 100  # the newest errors kept in the view (and so in its checkpoint)


class Projector:
    """The view a process serves, fed one record at a time; `view` is never half-applied."""

    def __init__(
        self,
        view: View | None = None,
        *,
        code: str,
        topics: tuple[str, ...],
        plugins: Plugins = DEFAULT_PLUGINS,
        saved: bytes | None = None,
    ) -> None:
        self.view = view if view is not None else View(plugins=plugins)
        self.code = code
        self.topics = topics
        self.plugins = plugins
        # The view as of the last checkpoint (what a failed record falls back to) and every
        # record applied since, in order, as read (raw bytes are several times smaller than
        # decoded records, and decoding them again gives the same records).
        self._saved = saved if saved is not None else self._dump()
        self._since: list[tuple[str, bytes]] = []
        self.unsaved = 0  # records (applied or skipped) not yet in a checkpoint
        self.fed = 0  # records fed to this projector, both topics
        self.journal_fed = 0  # journal records among them

    def journal(self, where: str, offset: int, value: bytes) -> None:
        """One record read from quotaflow.journal at `where` ("topic:partition") and `offset`."""
        self.fed += 1
        self.journal_fed += 1
        try:
            record = decode_journal(value)
        except Exception as exc:
            self._skip(where, offset, f"journal {where}@{offset}: {_why(exc)}")
            return
        try:
            self.view.apply(record)
        except Exception as exc:
            self._fall_back()
            self._skip(where, offset, f"journal {where}@{offset} seq {record.seq}: {_why(exc)}")
            return
        self._since.append(("journal", value))
        self._advance(where, offset)

    def settle(self) -> None:
        """The journal read so far ends with a whole batch: run its group's cycle now.

        The scheduler writes each batch in one transaction with a ts of its own, so once a
        read_committed reader is at the journal's end no record of the open group can follow;
        closing it now emits what closing it at the next record would. Without this the view
        would lag one batch behind while the scheduler journals nothing (no Ticks while idle).
        """
        if not self.view.state.group_open:
            return
        try:
            self.view.finish()
        except Exception as exc:
            self._fall_back()
            errors = self.view.errors
            errors.append(f"journal: closing seq {self.view.state.seq}'s group: {_why(exc)}")
            del errors[:-MAX_ERRORS]

    def command(self, where: str, offset: int, value: bytes) -> None:
        """One record read from quotaflow.commands: checked against the commands folded."""
        self.fed += 1
        try:
            raw = decode_command(value)
        except Exception as exc:
            self._skip(where, offset, f"commands {where}@{offset}: {_why(exc)}")
            return
        try:
            self.view.observe_command(raw)
        except Exception as exc:
            self._fall_back()
            self._skip(where, offset, f"commands {where}@{offset}: {_why(exc)}")
            return
        self._since.append(("command", value))
        self._advance(where, offset)

    def checkpoint(self) -> bytes:
        """The view and its offsets as checkpoint bytes; failures fall back to this point now."""
        self._saved = self._dump()
        self._since.clear()
        self.unsaved = 0
        return self._saved

    def _dump(self) -> bytes:
        return dump(self.view, code=self.code, topics=self.topics)

    def _advance(self, where: str, offset: int) -> None:
        self.view.offsets[where] = offset + 1
        self.unsaved += 1

    def _skip(self, where: str, offset: int, message: str) -> None:
        errors = self.view.errors
        errors.append(message)
        del errors[:-MAX_ERRORS]
        self._advance(where, offset)

    def _fall_back(self) -> None:
        """Replaces the (possibly half-applied) view by the last checkpoint plus the records since."""
        offsets, errors, process = (
            dict(self.view.offsets),
            list(self.view.errors),
            self.view.process,
        )
        view = load(self._saved, code=self.code, topics=self.topics, plugins=self.plugins).view
        for kind, value in self._since:
            if kind == "journal":
                view.apply(decode_journal(value))
            else:
                view.observe_command(decode_command(value))
        # Offsets and errors as they were just before the failed record (skips included).
        view.offsets, view.errors, view.process = offsets, errors, process
        self.view = view


def _why(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
