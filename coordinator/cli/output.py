"""What the client commands print: tables that fit the terminal for people, one JSON
object for scripts (``--output table|wide|json``; ``--json`` is ``--output json``).

The JSON of every object is made here, by one rule, from the SDK's values (the
documented shapes are in docs/cli-json.md):

- the SDK's field names (``JobInfo.wire_name`` is ``wire_name``), every field present,
  ``null`` when unset;
- states, outcomes and other enumerations by their SDK values (``"available"``);
- times as RFC 3339 UTC strings with milliseconds (``2026-12-01T10:00:00.000Z``);
- durations in seconds, the key ending in ``_s`` (``retry_delay_s``);
- bytes (payloads, outputs) under two keys: ``<name>`` holds the decoded JSON value when
  the bytes are UTF-8 JSON, else ``<name>_base64`` holds them in base64 (the other one,
  or both when there are none, ``null``);
- a command prints one object: a single thing under its name (``{"job": ...}``), lists
  under the plural (``{"jobs": [...], "next_page_token": ...}``).

Tables: on a terminal, columns are truncated with an ellipsis to its width (or to
``COLUMNS`` when set); IDs are never cut. Into a pipe or a file without ``COLUMNS``,
nothing is cut: ``runwick jobs list | grep -c succeeded`` must see whole states.
``wide`` shows more columns and cuts nothing.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import io
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

OUTPUT_MODES = ("table", "wide", "json")
_WIDE_WIDTH = 100_000
"""Wide tables are as wide as their cells."""


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``--output`` and its shorthand ``--json``."""
    parser.add_argument(
        "--output",
        "-o",
        choices=OUTPUT_MODES,
        default=os.environ.get("RUNWICK_OUTPUT") or "table",
        help="table: fit the terminal (default); wide: every column, nothing cut; "
        "json: one JSON object (docs/cli-json.md) [RUNWICK_OUTPUT]",
    )
    parser.add_argument("--json", action="store_true", help="the same as --output json")


def output_mode(options: argparse.Namespace) -> str:
    """``table``, ``wide`` or ``json``."""
    if getattr(options, "json", False):
        return "json"
    mode: str = getattr(options, "output", "table")
    if mode not in OUTPUT_MODES:  # a default from RUNWICK_OUTPUT, which argparse does not check
        raise ValueError(f"RUNWICK_OUTPUT must be one of {', '.join(OUTPUT_MODES)}, got {mode!r}")
    return mode


def wants_json(options: argparse.Namespace) -> bool:
    return output_mode(options) == "json"


# -- JSON ------------------------------------------------------------------------------


def emit(document: dict[str, object]) -> None:
    """Prints one JSON object on one line."""
    print(json.dumps(document, ensure_ascii=False))


def to_json(value: object) -> dict[str, Any]:
    """An SDK value (a dataclass) as the commands print it (see the module docstring)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"not an SDK value: {value!r}")
    document: dict[str, Any] = {}
    for item in dataclasses.fields(value):
        _put(document, item.name, getattr(value, item.name))
    return document


def _put(document: dict[str, Any], name: str, value: object) -> None:
    if isinstance(value, timedelta) or (value is None and name in _DURATIONS):
        document[f"{name}_s"] = None if value is None else value.total_seconds()
    elif isinstance(value, bytes) or (value is None and name in _BYTES):
        document[name], document[f"{name}_base64"] = bytes_json(value)
    else:
        document[name] = json_value(value)


_DURATIONS = {"execution_timeout", "retry_delay", "oldest_available_age"}
"""Optional duration fields: unset, they still print as ``<name>_s: null``."""
_BYTES = {"output", "payload"}
"""Optional bytes fields: unset, they print as ``null``."""


def json_value(value: object) -> Any:
    if value is None or (isinstance(value, bool | int | float | str) and not isinstance(value, Enum)):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return show_instant(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, tuple | list):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(json_value(key)): json_value(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, bytes):
        return bytes_json(value)[0]
    raise TypeError(f"no JSON form for {type(value).__name__}")


def bytes_json(data: bytes | None) -> tuple[Any, str | None]:
    """``(decoded JSON, None)`` for UTF-8 JSON bytes, ``(None, base64)`` for other bytes,
    ``(None, None)`` for none (or the empty bytes list views carry)."""
    if not data:
        return None, None
    try:
        return json.loads(data.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError):
        return None, base64.b64encode(data).decode("ascii")


def show_instant(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds and ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- people ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    header: str
    keep: bool = False
    """Never cut (IDs): the other columns give way."""
    wide_only: bool = False
    """Shown only with ``--output wide``."""
    max_width: int | None = None
    """In table mode, cut cells longer than this first (lists such as scopes)."""


def table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, wide: bool = False) -> None:
    """Prints ``rows`` under the headers, fitted to the terminal (or, ``wide`` or into a
    pipe, whole)."""
    shown = [index for index, column in enumerate(columns) if wide or not column.wide_only]
    fit = None if wide else _fit_width()
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
    for index in shown:
        column = columns[index]
        if column.keep or fit is None:
            width = _keep_width(column, rows, index)
            grid.add_column(column.header, no_wrap=True, overflow="ignore", min_width=width)
        else:
            grid.add_column(
                column.header,
                no_wrap=True,
                overflow="ellipsis",
                min_width=len(column.header),
                max_width=column.max_width,
            )
    for row in rows:
        grid.add_row(*(Text(str(row[index])) for index in shown))
    terminal = sys.stdout.isatty()
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=_WIDE_WIDTH if fit is None else fit,
        force_terminal=terminal,
        color_system="auto" if terminal else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
    )
    console.print(grid)
    for line in buffer.getvalue().splitlines():
        print(line.rstrip())


def _fit_width() -> int | None:
    """The width a table is cut to: the terminal's, or ``COLUMNS`` when set; None (cut
    nothing) when stdout is a pipe or a file, where a cut value would mislead a script."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console(file=sys.stdout).width
    return None


def _keep_width(column: Column, rows: Sequence[Sequence[str]], index: int) -> int:
    return max([len(column.header), *(len(str(row[index])) for row in rows)])


def fields_view(rows: Sequence[tuple[str, str]]) -> None:
    """Prints ``name  value`` lines, names aligned (a single object for people)."""
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        lines = value.splitlines() or [""]
        print(f"{name.ljust(width)}  {lines[0]}".rstrip())
        for more in lines[1:]:
            print(f"{' ' * width}  {more}".rstrip())


def show_time(moment: datetime | None, *, wide: bool = True) -> str:
    """A time for people: ``-`` when unset; UTC to the second in tables, marked ``Z`` so
    nobody reads it as local time (to the millisecond, RFC 3339, when ``wide``)."""
    if moment is None:
        return "-"
    if wide:
        return show_instant(moment)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def show_age(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago, in one unit: ``12s``, ``5m``, ``3h``, ``2d``."""
    if moment is None:
        return "-"
    seconds = max(int(((now or datetime.now(UTC)) - moment).total_seconds()), 0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def show_bytes(data: bytes | None, limit: int = 500) -> str:
    """A payload or output for a person: its JSON or text when it is UTF-8 (cut at
    ``limit`` characters), else its size."""
    if data is None:
        return "-"
    if not data:
        return "(empty)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"({len(data)} bytes, not text; --json shows them in base64)"
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + f"… ({len(data)} bytes)"
