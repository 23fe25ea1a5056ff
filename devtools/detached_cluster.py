"""The detached local cluster of `quotaflow kafka start --brokers N`, found again through a state file (developer tool, I/O)."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.broker import LOG_FILE
from devtools.cluster import ClusterHandle, NodeLayout, start_cluster
from devtools.handle import BrokerHandle
from devtools.kafka_home import kafka_dir

_CLUSTER_STATE = "cluster.json"


def cluster_state_path(root: Path) -> Path:
    return kafka_dir(root) / _CLUSTER_STATE


def default_cluster_dir(root: Path) -> Path:
    return kafka_dir(root) / "cluster"


def write_cluster_state(root: Path, handle: ClusterHandle) -> Path:
    """Record every node of ``handle`` in ``<home>/.kafka/cluster.json``."""
    path = cluster_state_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "bootstrap": handle.bootstrap,
        "nodes": [
            {
                "node_id": node.node_id,
                "port": node.port,
                "controller_port": node.controller_port,
                "data_dir": str(node.data_dir),
                "pid": broker.pid,
            }
            for node, broker in zip(handle.nodes, handle.brokers, strict=True)
        ],
    }
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    temporary.replace(path)
    return path


def read_cluster_state(root: Path) -> ClusterHandle | None:
    """The cluster recorded by ``write_cluster_state``, alive or not; None without a valid record."""
    try:
        state = json.loads(cluster_state_path(root).read_text())
        nodes = [
            NodeLayout(
                int(entry["node_id"]),
                int(entry["port"]),
                int(entry["controller_port"]),
                Path(entry["data_dir"]),
            )
            for entry in state["nodes"]
        ]
        brokers = [
            BrokerHandle(
                pid=int(entry["pid"]),
                bootstrap=node.bootstrap,
                data_dir=node.data_dir,
                log_path=node.data_dir / LOG_FILE,
            )
            for entry, node in zip(state["nodes"], nodes, strict=True)
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ClusterHandle(root, nodes, brokers)


def ensure_cluster(
    root: Path, brokers: int, data_dir: Path | None = None, timeout_s: float = 180
) -> ClusterHandle:
    """Return the live recorded cluster, or start one detached (same ports when restarted)."""
    current = read_cluster_state(root)
    if current is not None and current.is_alive():
        return current
    layout = current.nodes if current is not None and len(current.nodes) == brokers else None
    if (
        data_dir is not None
        and layout is not None
        and layout[0].data_dir.parent != data_dir.resolve()
    ):
        layout = None
    handle = start_cluster(
        root, data_dir or default_cluster_dir(root), brokers, timeout_s, nodes=layout
    )
    write_cluster_state(root, handle)
    return handle


def stop_cluster_from_state(root: Path, timeout_s: float = 60) -> bool:
    """Stop every node of the recorded cluster and forget it; False if none was running."""
    handle = read_cluster_state(root)
    was_running = handle is not None and handle.is_alive()
    if handle is not None and was_running:
        handle.stop(timeout_s)
    cluster_state_path(root).unlink(missing_ok=True)
    return was_running
