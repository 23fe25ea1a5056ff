"""The scheduler's state at start-up: the newest snapshot the journal confirms plus the journal
after it, or the whole journal folded (I/O shell).

Split from streams/sequencer.py along the start-up seam; the sequencer decides when to
rebuild, this module only reads and folds.
"""

from __future__ import annotations

import contextlib
import logging

from domain.codec import decode_journal
from domain.decider import close_group, fold, initial_state
from domain.plugins import DEFAULT_PLUGINS, Plugins
from domain.state import State
from streams.journal_reader import stream_to_end
from streams.kafka_io import Topics
from streams.snapshot_reader import newest_first, read_journal_from
from streams.snapshots import Manifest
from streams.standby import WarmStart, continue_warm

__all__ = ["load_state"]

log = logging.getLogger("quotaflow.scheduler")


async def load_state(
    bootstrap: str,
    topics: Topics,
    cluster: str,
    plugins: Plugins = DEFAULT_PLUGINS,
    load_snapshots: bool = True,
    *,
    warm: WarmStart | None = None,
) -> tuple[State, Manifest | None]:
    """A standby's state continued to the journal's end (``warm``, when the journal confirms
    it), else the newest valid snapshot plus the journal after it, or the whole journal folded."""
    key = cluster.encode()
    if warm is not None:
        state = await continue_warm(bootstrap, topics, key, warm, plugins)
        if state is not None:
            return state, None
    if load_snapshots:
        try:
            found = await _from_snapshot(bootstrap, topics, cluster, plugins)
        except Exception as exc:  # the journal alone is always enough
            log.warning("could not read snapshots (%r); reading the whole journal", exc)
            found = None
        if found is not None:
            return found
    state = initial_state()
    # Streamed page by page: memory bounded by the state, not by the journal.
    async for page in stream_to_end(bootstrap, topics.journal):
        for raw in page:
            if raw.key != key or raw.value is None:
                continue  # another cluster's record on a shared journal
            state, _ = fold(state, decode_journal(raw.value), plugins)
    state, _ = close_group(state, plugins)
    return state, None


async def _from_snapshot(
    bootstrap: str, topics: Topics, cluster: str, plugins: Plugins
) -> tuple[State, Manifest] | None:
    """The newest snapshot that the journal confirms, folded on to the journal's end."""
    snapshots = newest_first(bootstrap, topics.snapshots, cluster)
    async with contextlib.aclosing(snapshots):
        async for loaded in snapshots:
            manifest = loaded.manifest
            tail = await read_journal_from(
                bootstrap, topics.journal, manifest.journal_offset, cluster.encode()
            )
            # The record at the snapshot's offset must be the one with its seq, and the
            # tail must follow it without a gap; otherwise try an older snapshot.
            seqs = [record.seq for record in tail]
            if not seqs or seqs != list(range(manifest.seq, manifest.seq + len(seqs))):
                log.warning(
                    "snapshot at seq %d passed over: the journal at offset %d does not continue it",
                    manifest.seq,
                    manifest.journal_offset,
                )
                continue
            state = loaded.state
            for record in tail[1:]:
                state, _ = fold(state, record, plugins)
            state, _ = close_group(state, plugins)
            log.info(
                "state from the snapshot at seq %d plus %d journal records",
                manifest.seq,
                len(tail) - 1,
            )
            return state, manifest
    log.info("no usable snapshot; reading the whole journal")
    return None
