"""The database flags of ``runwick serve`` and ``runwick migrate``: which database
(``--database-url`` or ``RUNWICK_DATABASE_URL``, or a file holding it) and how long a
connection may hold or wait for a transaction. ``coordinator.config`` is imported inside
the functions, so building the parser loads none of the server's dependencies.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

DATABASE_URL_ENV = "RUNWICK_DATABASE_URL"


def database_flag(parser: argparse.ArgumentParser) -> None:
    """Adds ``--database-url`` (``database_url`` reads it with its fallbacks)."""
    parser.add_argument(
        "--database-url",
        default=None,
        help="sqlite:///path or postgresql://user@host/db (default sqlite:///runwick.db) "
        f"[{DATABASE_URL_ENV}, or {DATABASE_URL_ENV}_FILE: a file holding it]",
    )


def database_url(options: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
    """The database URL: the flag, else ``RUNWICK_DATABASE_URL`` or the file
    ``RUNWICK_DATABASE_URL_FILE`` names (a mounted Secret), else the SQLite default.
    Raises ConfigError for both variables set or an unreadable file."""
    from coordinator.config import DEFAULT_DATABASE_URL, env_or_file

    if options.database_url:
        return str(options.database_url)
    found = env_or_file(os.environ if environ is None else environ, DATABASE_URL_ENV)
    return found[0] if found else DEFAULT_DATABASE_URL


DATABASE_TIMEOUTS = (
    # (flag and config field stem, default seconds, what it bounds)
    ("pg_idle_in_transaction_timeout", "10", "PostgreSQL: end a session idle this long inside a transaction"),
    ("pg_lock_timeout", "5", "PostgreSQL: fail a statement waiting this long for a lock"),
    ("pg_statement_timeout", "30", "PostgreSQL: cancel a statement running this long"),
    ("sqlite_busy_timeout", "30", "SQLite: fail a transaction waiting this long for the write lock"),
)
"""Every transaction the coordinator opens is bounded; each flag is in seconds, 0 = off."""


def seconds(text: str) -> float:
    """An argparse type: a number of seconds a PostgreSQL timeout can hold, 0 = off."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 2_000_000:  # PostgreSQL takes at most 2**31 - 1 ms
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 (off) to 2000000 seconds")
    return value


def database_timeout_flags(serve: argparse.ArgumentParser) -> None:
    """Adds a flag per ``DATABASE_TIMEOUTS`` row, each with its environment variable."""
    group = serve.add_argument_group("database timeouts", "seconds; 0 turns one off")
    for stem, default, what in DATABASE_TIMEOUTS:
        env = f"RUNWICK_{stem.upper()}_S"
        group.add_argument(
            "--" + stem.replace("_", "-"),
            dest=stem,
            type=seconds,
            default=os.environ.get(env, default),  # a string default goes through ``type`` too
            metavar="S",
            help=f"{what} (default {default}) [{env}]",
        )


def database_timeouts_config(options: argparse.Namespace) -> dict[str, Any]:
    """The CoordinatorConfig fields the database timeout flags set, in milliseconds."""
    return {f"{stem}_ms": round(getattr(options, stem) * 1000) for stem, _, _ in DATABASE_TIMEOUTS}


def redacted_url(url: str) -> str:
    """The database URL without its password, to print."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"
