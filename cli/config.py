"""The clients' configuration from one place: a flag, else the environment, else the config file (I/O shell).

The file is TOML (`$QUOTAFLOW_CONFIG`, else `$XDG_CONFIG_HOME/quotaflow/config.toml`, else
`~/.config/quotaflow/config.toml`); a missing file is no error, a malformed one is. Top-level
keys are the settings below; each table (`[security]`, ...) is a *section* of free-form
client settings that another module declares with `register_section`, with its own
environment prefix, so new groups of settings plug in without changing this loader.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CONFIG_ENV = "QUOTAFLOW_CONFIG"


class ConfigError(ValueError):
    """A config file or setting that cannot be used; the message names the file or variable."""


@dataclass(frozen=True)
class Setting:
    """One top-level setting: its environment variable and what it means."""

    env: str
    help: str


SETTINGS: dict[str, Setting] = {
    "bootstrap": Setting("QUOTAFLOW_BOOTSTRAP", "Kafka bootstrap address"),
    "topic_prefix": Setting("QUOTAFLOW_TOPIC_PREFIX", "prefix of every topic name"),
    "wait_s": Setting("QUOTAFLOW_WAIT_S", "how long producers wait for the scheduler's verdict"),
    "api": Setting("QUOTAFLOW_API", "URL of a running `quotaflow projections`"),
}

# section name -> environment prefix: `[security] protocol = "SSL"` or QUOTAFLOW_SECURITY_PROTOCOL.
SECTIONS: dict[str, str] = {}


def register_section(name: str, env_prefix: str) -> None:
    """Declares a `[name]` table of the config file, overridable key by key from env_prefix + KEY."""
    SECTIONS[name] = env_prefix


register_section("security", "QUOTAFLOW_SECURITY_")


def config_path() -> Path:
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "quotaflow" / "config.toml"


@cache
def _file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if os.environ.get(CONFIG_ENV):
            raise ConfigError(f"config {path}: no such file (from ${CONFIG_ENV})") from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {path}: cannot read: {exc}") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path}: not valid TOML: {exc}") from None
    for key, value in document.items():
        if isinstance(value, dict):
            if key not in SECTIONS:
                known = ", ".join(f"[{name}]" for name in sorted(SECTIONS))
                raise ConfigError(f"config {path}: unknown table [{key}] (known: {known})")
        elif key not in SETTINGS:
            known = ", ".join(sorted(SETTINGS))
            raise ConfigError(f"config {path}: unknown setting {key!r} (known: {known})")
    return document


def setting(name: str, flag: Any = None) -> str | None:
    """A top-level setting as text: the flag when given, else its environment variable, else the file."""
    if flag is not None and flag != "":
        return str(flag)
    from_env = os.environ.get(SETTINGS[name].env)
    if from_env:
        return from_env
    value = _file(config_path()).get(name)
    return None if value is None else str(value)


def section(name: str) -> dict[str, str]:
    """A section's settings: the file's table, each key overridden by its environment variable."""
    prefix = SECTIONS[name]
    table: Mapping[str, Any] = _file(config_path()).get(name, {})
    values = {key: str(value) for key, value in table.items()}
    for variable, value in sorted(os.environ.items()):
        if variable.startswith(prefix) and value:
            values[variable[len(prefix) :].lower()] = value
    return values


def topic_prefix_default() -> str:
    """The topic prefix when no flag names one: environment, else file, else none."""
    return setting("topic_prefix") or ""


def wait_default(fallback: float) -> float:
    text = setting("wait_s")
    if text is None:
        return fallback
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"wait_s {text!r}: not a number of seconds") from None
    if not value > 0:
        raise ConfigError(f"wait_s {text!r}: must be > 0")
    return value
