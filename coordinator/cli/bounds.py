"""``runwick serve``'s bounds (docs/limits.md): flags, ``RUNWICK_*`` variables and a TOML file.

Every ``StoreBounds`` field ``max_x`` is set, later wins, by

1. its default (docs/limits.md);
2. ``max_x = N`` in the ``[bounds]`` table of the file named by ``--config`` or
   ``RUNWICK_CONFIG``;
3. the environment variable ``RUNWICK_MAX_X``;
4. the flag ``--max-x``.

The result is checked against ``bounds.RANGES``; a wrong value is a ``ConfigError``
naming where it came from.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from coordinator.config import ConfigError
from coordinator.domain.bounds import BoundsError, StoreBounds

BOUNDS_TABLE = "bounds"
RETENTION_TABLE = "retention"
"""Read by ``cli.retention``; named here so the file's tables are checked in one place."""
CONFIG_TABLES = (BOUNDS_TABLE, RETENTION_TABLE)
CONFIG_ENV = "RUNWICK_CONFIG"
BOUND_NAMES = tuple(item.name for item in fields(StoreBounds))


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_of(name: str) -> str:
    return "RUNWICK_" + name.upper()


def add_bounds_flags(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config`` and one ``--max-...`` flag per bound to ``serve``."""
    parser.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help=f"TOML file whose [{BOUNDS_TABLE}] and [{RETENTION_TABLE}] tables set the bounds and "
        f"retention below [{CONFIG_ENV}]",
    )
    group = parser.add_argument_group(
        "bounds",
        "limits on what the store accepts (docs/limits.md); flag > environment > config file > default",
    )
    defaults = StoreBounds()
    for name in BOUND_NAMES:
        group.add_argument(
            flag_of(name),
            dest=name,
            type=int,
            default=None,
            metavar="N",
            help=f"default {getattr(defaults, name)} [{env_of(name)}]",
        )


def load_config_document(path: str | Path) -> dict[str, Any]:
    """The TOML config file; raises ConfigError for an unreadable file, bad TOML and
    tables other than ``CONFIG_TABLES``."""
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(document) - set(CONFIG_TABLES))
    if unknown:
        known = ", ".join(f"[{name}]" for name in CONFIG_TABLES)
        raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}; known: {known}")
    return document


def load_bounds_table(path: str | Path) -> dict[str, int]:
    """The ``[bounds]`` table of a TOML config file (empty when it has none).

    Raises ConfigError for an unreadable file, bad TOML, unknown tables or keys, and
    values that are not integers.
    """
    document = load_config_document(path)
    table: Any = document.get(BOUNDS_TABLE, {})
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: {BOUNDS_TABLE} must be a table ([{BOUNDS_TABLE}])")
    values: dict[str, int] = {}
    for key, value in table.items():
        if key not in BOUND_NAMES:
            known = ", ".join(BOUND_NAMES)
            raise ConfigError(f"config file {path}: [{BOUNDS_TABLE}] has no setting {key!r}; known: {known}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config file {path}: [{BOUNDS_TABLE}] {key} must be an integer, got {value!r}")
        values[key] = value
    return values


def resolve_bounds(
    flags: Mapping[str, int | None],
    environ: Mapping[str, str],
    config_path: str | None = None,
) -> StoreBounds:
    """The bounds from defaults < config file < environment < flags, checked."""
    path = config_path or environ.get(CONFIG_ENV) or None
    values: dict[str, int] = load_bounds_table(path) if path else {}
    sources = dict.fromkeys(values, f"config file {path}")
    for name in BOUND_NAMES:
        text = environ.get(env_of(name))
        if text is not None and text.strip():
            try:
                values[name] = int(text.strip().replace("_", ""))
            except ValueError:
                raise ConfigError(f"{env_of(name)} must be an integer, got {text!r}") from None
            sources[name] = env_of(name)
        flag = flags.get(name)
        if flag is not None:
            values[name] = flag
            sources[name] = flag_of(name)
    bounds = replace(StoreBounds(), **values)
    try:
        return bounds.validate()
    except BoundsError as exc:
        where = sources.get(exc.field, "the bounds")
        raise ConfigError(f"{exc} (from {where})") from exc


def bounds_from_options(options: argparse.Namespace, environ: Mapping[str, str] | None = None) -> StoreBounds:
    """``resolve_bounds`` for parsed ``serve`` options."""
    flags = {name: getattr(options, name, None) for name in BOUND_NAMES}
    return resolve_bounds(flags, os.environ if environ is None else environ, getattr(options, "config", None))
