"""The detached broker of `quotaflow kafka start / stop / status`, found again through a state file (developer tool, I/O)."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.broker import LOG_FILE, start_broker
from devtools.handle import BrokerHandle
from devtools.kafka_home import state_path
from devtools.security import SecureSetup


def write_state(root: Path, handle: BrokerHandle) -> Path:
    """Record ``handle`` in ``<home>/.kafka/broker.json`` so another process can find or stop it."""
    path = state_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "pid": handle.pid,
        "bootstrap": handle.bootstrap,
        "data_dir": str(handle.data_dir),
        "log_path": str(handle.log_path),
        **({"security_dir": str(handle.security_dir)} if handle.security_dir else {}),
    }
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    temporary.replace(path)
    return path


def read_state(root: Path) -> BrokerHandle | None:
    """The broker recorded by ``write_state``, alive or not; None when there is no valid record."""
    try:
        state = json.loads(state_path(root).read_text())
        data_dir = Path(state["data_dir"])
        return BrokerHandle(
            pid=int(state["pid"]),
            bootstrap=str(state["bootstrap"]),
            data_dir=data_dir,
            log_path=Path(state.get("log_path") or data_dir / LOG_FILE),
            security_dir=Path(state["security_dir"]) if state.get("security_dir") else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_broker(
    root: Path,
    data_dir: Path | None = None,
    port: int | None = None,
    controller_port: int | None = None,
    timeout_s: float = 90,
    secure: SecureSetup | None = None,
) -> BrokerHandle:
    """Return the live broker from the state file, or start one detached and record it."""
    current = read_state(root)
    if current is not None and current.is_alive():
        return current
    handle = start_broker(root, data_dir, port, controller_port, timeout_s, secure)
    write_state(root, handle)
    return handle


def stop_from_state(root: Path, timeout_s: float = 30) -> bool:
    """Stop the broker recorded in the state file and forget it; False if none was running."""
    handle = read_state(root)
    was_running = handle is not None and handle.is_alive()
    if handle is not None and was_running:
        handle.stop(timeout_s)
    state_path(root).unlink(missing_ok=True)
    return was_running
