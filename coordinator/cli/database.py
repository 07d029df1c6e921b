"""One clear line, not a traceback, when ``serve``, ``migrate`` or ``bench`` fail on their
database: an unreachable host, a database that does not exist, a URL that does not parse
or names another database, a SQLite path that cannot be opened. A Kubernetes init
container must print what to do, not Python's internals."""

from __future__ import annotations

import argparse
import json
import sys

from coordinator.cli.database_flags import database_url, redacted_url
from coordinator.cli.exits import EXIT_DATABASE_UNSTABLE

EXIT_DATABASE = 2
"""Bad input: the database URL or the database it names."""
_SQLITE_HINT = "does its directory exist, and may this user write there?"


def database_refusal(command: str, options: argparse.Namespace, exc: Exception) -> int | None:
    """Prints what went wrong and returns the exit status, or None when ``exc`` is not
    about the database (the caller raises it then)."""
    from coordinator.app import DatabaseKeptFailing, database_failure

    if isinstance(exc, DatabaseKeptFailing):
        _print(options, f"runwick {command}: {exc}; is the database restarting or failing over?")
        return EXIT_DATABASE_UNSTABLE
    said = database_failure(exc)
    if said is None:
        return None
    try:
        url = redacted_url(database_url(options))
    except Exception:  # the URL came from the options; a failure to read it was said before
        url = "(the configured URL)"
    if "unable to open database file" in said:
        said = f"{said} ({_SQLITE_HINT})"
    message = (
        f"runwick {command}: the database {url} failed: {said}. Check --database-url (RUNWICK_DATABASE_URL)."
    )
    _print(options, message)
    return EXIT_DATABASE


def _print(options: argparse.Namespace, message: str) -> None:
    if getattr(options, "log_format", "text") == "json":
        print(json.dumps({"level": "ERROR", "logger": "runwick", "message": message}), file=sys.stderr)
    else:
        print(message, file=sys.stderr)
