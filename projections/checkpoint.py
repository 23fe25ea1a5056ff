"""The projections' checkpoint: a view and the offsets it reflects as one byte string, and back (pure).

A checkpoint is a cache of the journal, never a source of truth: whatever is wrong with one
(another code version, another pair of topics, a torn or flipped byte) makes `load` raise
`CheckpointError`, and the caller rebuilds from offset 0. The offsets live inside the
payload next to the view they describe, so the two can never be stored apart.

Layout: MAGIC, then a JSON header line (format version, code fingerprint, topics, seq,
offsets, payload length and SHA-256), then the payload: the view's fields, pickled. pickle
keeps every index, heap and cache of the core's State exactly, at a fraction of the code a
field-by-field encoding would need; it is safe here because a checkpoint is only ever read
by the process that wrote it (same code, checked by the fingerprint) from a directory the
operator owns, and the digest is checked before anything is unpickled.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, fields
from typing import Any

import orjson

from domain.plugins import DEFAULT_PLUGINS, Plugins
from projections.view import View

MAGIC = b"QUOTAFLOW-PROJECTIONS-CHECKPOINT\n"
FORMAT = 1
# Not part of the checkpoint: the plugins are code (given again on load), `process` says
# how the serving process started and is rebuilt by it.
_NOT_SAVED = frozenset({"plugins", "process"})


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says why, in a few words."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What `load` gives back: the view (offsets included) and where it was taken."""

    view: View
    seq: int
    topics: tuple[str, ...]


def dump(view: View, *, code: str, topics: tuple[str, ...]) -> bytes:
    """The view and its offsets as one byte string, tagged with the code and topics it belongs to."""
    state = {f.name: getattr(view, f.name) for f in fields(view) if f.name not in _NOT_SAVED}
    payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    header = {
        "format": FORMAT,
        "code": code,
        "topics": list(topics),
        "seq": view.state.seq,
        "offsets": dict(sorted(view.offsets.items())),
        "length": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    return MAGIC + orjson.dumps(header) + b"\n" + payload


def header(data: bytes) -> dict[str, Any]:
    """The header of a checkpoint (cheap: the payload is not read)."""
    if not data.startswith(MAGIC):
        raise CheckpointError("not a projections checkpoint")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise CheckpointError("truncated header")
    try:
        parsed = orjson.loads(data[len(MAGIC) : end])
    except orjson.JSONDecodeError:
        raise CheckpointError("unreadable header") from None
    if not isinstance(parsed, dict):
        raise CheckpointError("unreadable header")
    return parsed


def load(
    data: bytes, *, code: str, topics: tuple[str, ...], plugins: Plugins = DEFAULT_PLUGINS
) -> Checkpoint:
    """The view saved by `dump`, or CheckpointError if it was written by other code, for
    other topics, or is damaged in any way."""
    head = header(data)
    if head.get("format") != FORMAT:
        raise CheckpointError(f"format {head.get('format')!r}, expected {FORMAT}")
    if head.get("code") != code:
        raise CheckpointError("written by another version of the code")
    if tuple(head.get("topics", ())) != tuple(topics):
        raise CheckpointError(f"written for topics {head.get('topics')}, not {list(topics)}")
    payload = data[data.find(b"\n", len(MAGIC)) + 1 :]
    if len(payload) != head.get("length") or hashlib.sha256(payload).hexdigest() != head.get(
        "sha256"
    ):
        raise CheckpointError("payload damaged (length or SHA-256 differs)")
    try:
        state = pickle.loads(payload)
        view = View(plugins=plugins)
        for name, value in state.items():
            setattr(view, name, value)
    except Exception as exc:  # a digest-valid payload that still fails: another Python, say
        raise CheckpointError(f"payload unreadable ({type(exc).__name__})") from None
    if view.state.seq != head.get("seq") or view.offsets != head.get("offsets"):
        raise CheckpointError("header and payload disagree")
    return Checkpoint(view=view, seq=view.state.seq, topics=tuple(topics))
