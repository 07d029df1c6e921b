"""``runwick serve``'s retention (R-19): how long finished jobs are kept, per state, and
how often retention runs. From flags, ``RUNWICK_*`` variables and the ``[retention]``
table of the TOML config file, later wins, as the bounds are (``cli.bounds``):

1. the ``CoordinatorConfig`` defaults (succeeded 7 days, failed and cancelled 30 days,
   every 60 s);
2. ``retain_succeeded = "7d"`` etc. in ``[retention]`` of the ``--config`` file;
3. ``RUNWICK_RETAIN_SUCCEEDED`` etc.;
4. ``--retain-succeeded`` etc.

Values are durations (``cli.durations``: ``30s``, ``15m``, ``12h``, ``7d``); ``0`` or
``off`` keeps the state's jobs forever (not for the interval). A wrong value is a
``ConfigError`` naming the setting and where it came from.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from coordinator.cli.bounds import CONFIG_ENV, RETENTION_TABLE, env_of, flag_of, load_config_document
from coordinator.cli.durations import DurationError, format_duration_ms, parse_duration_ms
from coordinator.config import ConfigError, CoordinatorConfig

AGES = {
    "retain_succeeded": "retain_succeeded_ms",
    "retain_failed": "retain_failed_ms",
    "retain_cancelled": "retain_cancelled_ms",
}
"""Setting (flag, variable and file key) -> the ``CoordinatorConfig`` field it sets."""
INTERVAL = "retention_interval"
SETTINGS = (*AGES, INTERVAL)
OFF = ("0", "off")


def _default(name: str) -> str:
    defaults = CoordinatorConfig()
    if name == INTERVAL:
        return format_duration_ms(round(defaults.retention_interval_s * 1000))
    age: int | None = getattr(defaults, AGES[name])
    return "off" if age is None else format_duration_ms(age)


def add_retention_flags(parser: argparse.ArgumentParser) -> None:
    """Adds ``--retain-succeeded``, ``--retain-failed``, ``--retain-cancelled`` and
    ``--retention-interval`` to ``serve``."""
    group = parser.add_argument_group(
        "retention (R-19)",
        "how long finished jobs are kept before they are purged (30s, 15m, 12h, 7d; 0 or off = "
        f"forever); flag > environment > [{RETENTION_TABLE}] of the config file > default",
    )
    for name in SETTINGS:
        state = name.removeprefix("retain_")
        what = f"keep {state} jobs this long" if name in AGES else "how often retention runs"
        group.add_argument(
            flag_of(name),
            dest=name,
            default=None,
            metavar="DURATION",
            help=f"{what}; default {_default(name)} [{env_of(name)}]",
        )


def _value(name: str, text: str, where: str) -> int | float | None:
    """The config value of one setting: ms (None = forever) for ages, seconds for the interval."""
    stripped = text.strip().lower()
    if name in AGES and stripped in OFF:
        return None
    try:
        ms = 0 if stripped in OFF else parse_duration_ms(text)
    except DurationError as exc:
        raise ConfigError(f"{name}: {exc} (from {where})") from None
    if name == INTERVAL:
        if ms <= 0:
            raise ConfigError(
                f"{name}: must be positive, got {text!r} (from {where}); to keep jobs forever set "
                "retain_succeeded, retain_failed and retain_cancelled to off"
            )
        return ms / 1000
    return ms


def load_retention_table(path: str) -> dict[str, str]:
    """The ``[retention]`` table of the config file, as text (empty when it has none).
    Raises ConfigError for unknown keys and values that are neither text nor 0."""
    table: Any = load_config_document(path).get(RETENTION_TABLE, {})
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: {RETENTION_TABLE} must be a table ([{RETENTION_TABLE}])")
    values: dict[str, str] = {}
    for key, value in table.items():
        if key not in SETTINGS:
            known = ", ".join(SETTINGS)
            raise ConfigError(
                f"config file {path}: [{RETENTION_TABLE}] has no setting {key!r}; known: {known}"
            )
        if isinstance(value, int) and not isinstance(value, bool) and value == 0:
            values[key] = "0"
            continue
        if not isinstance(value, str):
            raise ConfigError(
                f'config file {path}: [{RETENTION_TABLE}] {key} must be a duration such as "7d" '
                f'(or "off"), got {value!r}'
            )
        values[key] = value
    return values


def resolve_retention(
    flags: Mapping[str, str | None], environ: Mapping[str, str], config_path: str | None = None
) -> dict[str, Any]:
    """The ``CoordinatorConfig`` fields the retention settings set, from config file <
    environment < flags; the fields nobody set are left out (their defaults apply)."""
    path = config_path or environ.get(CONFIG_ENV) or None
    found: dict[str, tuple[str, str]] = {}
    if path:
        found = {name: (text, f"config file {path}") for name, text in load_retention_table(path).items()}
    for name in SETTINGS:
        text = environ.get(env_of(name))
        if text is not None and text.strip():
            found[name] = (text, env_of(name))
        flag = flags.get(name)
        if flag is not None:
            found[name] = (flag, flag_of(name))
    fields: dict[str, Any] = {}
    for name, (text, where) in found.items():
        fields[AGES.get(name, "retention_interval_s")] = _value(name, text, where)
    return fields


def retention_from_options(
    options: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``resolve_retention`` for parsed ``serve`` options."""
    flags = {name: getattr(options, name, None) for name in SETTINGS}
    return resolve_retention(
        flags, os.environ if environ is None else environ, getattr(options, "config", None)
    )
