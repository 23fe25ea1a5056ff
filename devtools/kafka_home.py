"""Where the local Kafka broker's files live, and its jars fetched once with Maven (developer tool, I/O).

Apache Kafka's broker jars come from Maven Central through ``deploy/kafka/pom.xml`` and are
cached in ``<home>/.kafka/libs``, where ``<home>`` is the repository root unless the
``QUOTAFLOW_HOME`` environment variable names another directory. See ``docs/kafka.md``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

HOME_ENV = "QUOTAFLOW_HOME"
MAVEN_COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"

_STAMP_FILE = ".complete.json"
_STATE_FILE = "broker.json"
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class BrokerError(RuntimeError):
    """The local broker could not be fetched, formatted, started, reached or stopped."""


# --- locations --------------------------------------------------------------------------


def project_root() -> Path:
    """The QuotaFlow checkout: the nearest directory above this file holding pyproject.toml."""
    here = Path(__file__).resolve().parent
    for directory in (here, *here.parents):
        if (directory / "pyproject.toml").is_file():
            return directory
    raise BrokerError(
        f"no pyproject.toml above {here}: the local broker needs a QuotaFlow checkout"
    )


def kafka_dir(root: Path) -> Path:
    """Where ``.kafka/`` lives: under ``$QUOTAFLOW_HOME`` when set, else under ``root``."""
    home = os.environ.get(HOME_ENV)
    return (Path(home).expanduser() if home else root).resolve() / ".kafka"


def default_data_dir(root: Path) -> Path:
    """The persistent data dir used when ``start_broker`` is given none."""
    return kafka_dir(root) / "data"


def state_path(root: Path) -> Path:
    """The state file describing the detached broker started by ``quotaflow kafka start``."""
    return kafka_dir(root) / _STATE_FILE


# --- jars -------------------------------------------------------------------------------


def ensure_jars(root: Path) -> Path:
    """Return the directory of broker jars, fetching them with Maven unless already cached."""
    pom = root / "deploy" / "kafka" / "pom.xml"
    if not pom.is_file():
        raise BrokerError(f"missing {pom}")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    libs = kafka_dir(root) / "libs"
    if _jars_complete(libs, digest):
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(libs.parent / "libs.lock"):
        if _jars_complete(libs, digest):  # another process fetched them while we waited
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError("Maven (mvn) is not on PATH; it is needed once to fetch Kafka's jars")
        print(
            f"quotaflow: fetching Apache Kafka broker jars with Maven into {libs} (first run only)",
            file=sys.stderr,
            flush=True,
        )
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
        try:
            command = [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                MAVEN_COPY_GOAL,
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            ]
            result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                output = _ANSI_ESCAPE.sub("", result.stdout + result.stderr)
                raise BrokerError(
                    f"Maven could not fetch Kafka's jars (exit {result.returncode}); "
                    f"last lines:\n{last_lines(output, 30)}"
                )
            jars = sorted(path.name for path in staging.glob("*.jar"))
            if not any(name.startswith("kafka_2.13-") for name in jars):
                raise BrokerError(f"Maven succeeded but no kafka_2.13 jar is in {staging}")
            stamp = {"pom_sha256": digest, "jars": jars}
            (staging / _STAMP_FILE).write_text(json.dumps(stamp, indent=1) + "\n")
            if libs.exists():
                shutil.rmtree(libs)
            staging.rename(libs)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return libs


def _jars_complete(libs: Path, pom_digest: str) -> bool:
    try:
        stamp = json.loads((libs / _STAMP_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("pom_sha256") != pom_digest:
        return False
    jars = stamp.get("jars")
    return isinstance(jars, list) and bool(jars) and all((libs / name).is_file() for name in jars)


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java is not on PATH (Kafka 4.0 needs Java 17 or newer)")
    return java


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:]) or "(no output)"
