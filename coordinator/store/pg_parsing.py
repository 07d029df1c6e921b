"""PostgreSQL: every statement's placeholders parsed once per process, not once per run.

psycopg turns a statement's ``%(name)s`` placeholders into PostgreSQL's ``$1`` with a
regular expression, and caches the result, but not for a statement longer than 4,096
bytes or with more than 50 parameters: an ORM's one-off statements (a multi-row
``VALUES`` of varying length) would only fill its cache. The coordinator's statements are
a bounded set of shapes (``store.prepared`` renders each once per ``IN`` list length,
``store.pg_held`` each combination of held writes once), and its hottest exceed those
limits: an enqueue's held insert of a job (its 30 columns as arrays, with its
transitions, attempt and count deltas) and a batch's reads by ID. Parsing one anew cost
140-300 us of Python a run, with the interpreter lock held: at a light load, between the
enqueue's claim going to the event loop and the loop getting the lock to deliver it.

So the limits are raised for this process and the cache made larger (psycopg's own
holds 128 statements). Without psycopg's module attributes (a future release may name
them differently) nothing changes: parsing is only slower.
"""

from __future__ import annotations

import functools

from psycopg import _queries

MAX_STATEMENT_BYTES = 1 << 16
MAX_STATEMENT_PARAMS = 4_096
"""Above ``tx_base.IN_CHUNK`` (1,000 values in one ``IN`` list) and any held statement."""
CACHED_STATEMENTS = 1_024
"""Statement shapes kept (a few hundred in a loaded coordinator's run, mostly ``IN`` list
lengths; a few kilobytes each)."""

_NAMES = ("MAX_CACHED_STATEMENT_LENGTH", "MAX_CACHED_STATEMENT_PARAMS", "_query2pg", "_query2pg_nocache")


def cache_every_statement() -> bool:
    """Makes psycopg cache the parsing of every statement up to the limits above; says
    whether it could (idempotent)."""
    if not all(hasattr(_queries, name) for name in _NAMES):
        return False
    _queries.MAX_CACHED_STATEMENT_LENGTH = max(_queries.MAX_CACHED_STATEMENT_LENGTH, MAX_STATEMENT_BYTES)
    _queries.MAX_CACHED_STATEMENT_PARAMS = max(_queries.MAX_CACHED_STATEMENT_PARAMS, MAX_STATEMENT_PARAMS)
    if _cache_size(_queries._query2pg) < CACHED_STATEMENTS:
        _queries._query2pg = functools.lru_cache(maxsize=CACHED_STATEMENTS)(_queries._query2pg_nocache)
    return True


def _cache_size(function: object) -> int:
    parameters = getattr(function, "cache_parameters", None)
    size = parameters().get("maxsize") if callable(parameters) else None
    return size if isinstance(size, int) else 0
