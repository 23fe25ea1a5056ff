"""A real three-node KRaft cluster, started once for the few tests that need it (I/O shell)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.cluster import ClusterHandle


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """Three broker+controller nodes on loopback, each with its own ports and data dir."""
    from devtools.cluster import start_cluster
    from devtools.kafka_home import project_root

    handle = start_cluster(project_root(), tmp_path_factory.mktemp("cluster"), brokers=3)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def all_nodes_up(kafka_cluster: ClusterHandle) -> Iterator[ClusterHandle]:
    """The cluster with every node running before and after the test (a test kills nodes)."""
    for node in kafka_cluster.nodes:
        kafka_cluster.restart(node.node_id)
    yield kafka_cluster
    for node in kafka_cluster.nodes:
        kafka_cluster.restart(node.node_id)
