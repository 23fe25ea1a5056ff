"""Starting a local cluster survives a picked port taken before its broker binds it (I/O)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devtools import broker, cluster
from devtools.kafka_home import project_root


def test_a_cluster_whose_picked_port_is_taken_starts_again_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a port another process holds, picked for the first attempt's broker
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        real = broker._pick_ports
        first = [(taken, real(None, None)[1])]
        monkeypatch.setattr(
            cluster, "_pick_ports", lambda port, cport: first.pop() if first else real(port, cport)
        )

        # When a one-node cluster starts
        handle = cluster.start_cluster(project_root(), tmp_path, brokers=1)
        try:
            # Then it runs on another port
            assert handle.nodes[0].port != taken
            assert handle.nodes[0].data_dir == tmp_path / "broker-1"
        finally:
            handle.stop()
