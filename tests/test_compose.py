"""docker-compose.yml runs as documented: the API is reachable from the host, every long-running
service has a healthcheck on its own port, a queue tree is applied, images are pinned (no Docker
engine here, so the file itself is checked)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _option(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def _published(service: dict[str, Any]) -> dict[str, str]:
    """container port -> host port."""
    out = {}
    for entry in service.get("ports", []):
        host, container = str(entry).rsplit(":", 1)
        out[container] = host.split(":")[-1]
    return out


def test_the_projections_api_is_reachable_from_the_host(compose: dict[str, Any]) -> None:
    projections = compose["services"]["projections"]
    command = projections["command"]
    assert _option(command, "--host") == "0.0.0.0"  # not 127.0.0.1 inside the container
    port = _option(command, "--port")
    assert port is not None and _published(projections).get(port) == "8080"


def test_every_long_running_service_has_a_healthcheck_on_its_port(compose: dict[str, Any]) -> None:
    services = compose["services"]
    # The default services; the "cluster" profile (three brokers, standby schedulers) is
    # started by hand and checked by tests/cluster instead.
    long_running = [
        name for name, s in services.items() if s.get("restart") != "no" and not s.get("profiles")
    ]
    assert {"kafka", "scheduler", "projections", "agent-1", "agent-2"} <= set(long_running)
    for name in long_running:
        check = services[name].get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
        if name == "kafka":
            continue
        command = services[name]["command"]
        port = _option(command, "--metrics-port") or _option(command, "--port")
        assert port is not None, f"{name} serves no HTTP port"
        probe = check["test"][-1]
        assert f"127.0.0.1:{port}/health" in probe, f"{name}'s check asks another port"
        compile(probe, f"{name} healthcheck", "exec")  # the Python it runs is valid
        if "--metrics-port" in command:
            assert _option(command, "--metrics-host") == "0.0.0.0"
            assert port in _published(services[name])
    host_ports = [h for s in services.values() for h in _published(s).values()]
    assert len(host_ports) == len(set(host_ports)), "two services publish the same host port"


def test_a_queue_tree_is_applied_once_the_scheduler_is_healthy(compose: dict[str, Any]) -> None:
    queues = compose["services"]["queues"]
    assert queues["command"][:2] == ["queue", "apply"]
    assert queues["depends_on"]["scheduler"]["condition"] == "service_healthy"
    path = queues["command"][-1]
    assert path == "/app/deploy/queues.yaml"
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY deploy/queues.yaml ./deploy/queues.yaml" in dockerfile
    checked = subprocess.run(
        [sys.executable, "-m", "cli", "queue", "apply", "--dry-run", "deploy/queues.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.count('"QueueConfigured"') == 4


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service.get("image", "")
        if "build" in service or image == "quotaflow:dev":
            continue  # built from deploy/Dockerfile, checked below
        assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+", image), f"{name}: {image!r} is not pinned"
    base = re.search(r"^FROM (\S+)", (ROOT / "deploy" / "Dockerfile").read_text(), re.M)
    assert base is not None and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base.group(1))
    # Python packages: the image installs the project with pyproject.toml's own ranges.
    assert "pip install ." in (ROOT / "deploy" / "Dockerfile").read_text()
