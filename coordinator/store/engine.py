"""Engines for both databases, with the settings each needs (docs/scaling.md).

Every transaction the coordinator opens is bounded (``DatabaseTimeouts``). On
PostgreSQL each connection starts with ``idle_in_transaction_session_timeout``,
``lock_timeout`` and ``statement_timeout`` (libpq ``options``), so a replica frozen inside
a transaction (SIGSTOP, a paused VM) is cut off by the server and the rows it locked,
which lease expiry skips (``SKIP LOCKED``), are freed; a statement waiting on a lock or
running too long fails (``StoreError``, UNAVAILABLE) instead of hanging.

SQLite needs none of these: it serves one coordinator process, the only writer, so a
frozen coordinator holds nothing any other replica waits for (there is none); another
process on the file (``runwick migrate``, a reader) waits at most ``busy_timeout`` for the
write lock and then fails, and WAL readers never wait. That ``busy_timeout`` is bounded
like the rest (``sqlite_busy_timeout_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from coordinator.store import pg_binary_arrays, pg_parsing
from coordinator.store.pg_cursor import OneSyncPerStatementCursor
from coordinator.store.prepared import Prepared

MAX_TIMEOUT_MS = 2**31 - 1
"""PostgreSQL's largest value for its timeouts (an ``int`` of milliseconds)."""


@dataclass(frozen=True, slots=True)
class DatabaseTimeouts:
    """How long one connection may hold a transaction open or wait on the database, in
    milliseconds; 0 turns a timeout off (PostgreSQL's meaning)."""

    pg_idle_in_transaction_timeout_ms: int = 10_000
    """PostgreSQL ``idle_in_transaction_session_timeout``: the server ends a session that
    sits idle inside a transaction this long, releasing its locks."""
    pg_lock_timeout_ms: int = 5_000
    """PostgreSQL ``lock_timeout``: a statement waiting this long for a lock fails."""
    pg_statement_timeout_ms: int = 30_000
    """PostgreSQL ``statement_timeout``: a statement running this long is cancelled."""
    sqlite_busy_timeout_ms: int = 30_000
    """SQLite ``busy_timeout``: how long a transaction waits for the write lock."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TIMEOUT_MS:
                raise ValueError(f"{item.name} must be 0 to {MAX_TIMEOUT_MS} milliseconds, got {value!r}")

    def pg_options(self) -> str:
        """The libpq ``options`` that set the PostgreSQL timeouts on a new session."""
        return (
            f"-c idle_in_transaction_session_timeout={self.pg_idle_in_transaction_timeout_ms} "
            f"-c lock_timeout={self.pg_lock_timeout_ms} "
            f"-c statement_timeout={self.pg_statement_timeout_ms}"
        )


DEFAULT_TIMEOUTS = DatabaseTimeouts()


def is_sqlite(url: str) -> bool:
    return make_url(normalize_url(url)).get_backend_name() == "sqlite"


class UnsupportedDatabase(ValueError):
    """A database URL that does not parse, or names a database Runwick does not run on."""


SUPPORTED_URLS = "sqlite:///PATH or postgresql://USER@HOST/DATABASE"


def normalize_url(url: str) -> str:
    """Lets users write ``postgresql://`` (or the common ``postgres://``) and still get
    the psycopg 3 driver. Raises UnsupportedDatabase for anything but SQLite and
    PostgreSQL, and for a URL that does not parse."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UnsupportedDatabase(f"the database URL does not parse; write {SUPPORTED_URLS}") from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres") and parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if backend not in ("sqlite", "postgresql"):
        raise UnsupportedDatabase(
            f"Runwick runs on SQLite and PostgreSQL, not {backend!r}; write {SUPPORTED_URLS}"
        )
    return url


# Every engine is made with ``hide_parameters``: a failed statement's exception (and so
# any log line that prints it) must not carry the values it wrote, such as an attempt's
# exception text or a token hash.


def create_write_engine(url: str, timeouts: DatabaseTimeouts = DEFAULT_TIMEOUTS) -> Engine:
    """The engine for writes. On SQLite every transaction is ``BEGIN IMMEDIATE``: a
    deferred one fails with "database is locked" when it upgrades to a write. On
    PostgreSQL every connection carries ``timeouts`` (module docstring)."""
    url = normalize_url(url)
    if is_sqlite(url):
        return _sqlite_engine(url, "BEGIN IMMEDIATE", timeouts)
    # No ping before each checkout: it doubled the server's transactions on the hot path.
    # A connection found dead by the write itself is ``ConnectionLost`` before the commit,
    # which ``Store.transact`` runs again; the pool then drops every older connection.
    return _pg_engine(url, timeouts, pool_size=5, pre_ping=False)


def create_read_engine(url: str, timeouts: DatabaseTimeouts = DEFAULT_TIMEOUTS) -> Engine:
    """Reads on SQLite use deferred transactions so they never wait for the writer (WAL).
    On PostgreSQL reads have a pool of their own that pings: a read is not retried, and
    after a server restart its first answer should not be an error."""
    url = normalize_url(url)
    if is_sqlite(url):
        return _sqlite_engine(url, "BEGIN", timeouts)
    return _pg_engine(url, timeouts, pool_size=4, pre_ping=True)


def _pg_engine(url: str, timeouts: DatabaseTimeouts, *, pool_size: int, pre_ping: bool) -> Engine:
    pg_parsing.cache_every_statement()  # the hot statements are long: psycopg would parse them anew
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=pre_ping,
        hide_parameters=True,
        # executemany without pipeline mode, which would disarm the idle timeout (pg_cursor).
        connect_args={"options": _pg_options(url, timeouts), "cursor_factory": OneSyncPerStatementCursor},
    )
    # The batched writes' arrays, encoded by column type (pg_binary_arrays).
    event.listen(engine, "connect", lambda connection, _record: pg_binary_arrays.register(connection))
    return engine


SESSION_SETTINGS = "-c jit=off"
"""JIT compiles a query whose estimated cost is high: tens of milliseconds of compiling
for statements that run in a fraction of one (seen at 20-80 ms a statement once stale
statistics made a claim look expensive). The coordinator's statements are all short."""


def _pg_options(url: str, timeouts: DatabaseTimeouts) -> str:
    """The timeouts' ``options`` and ``SESSION_SETTINGS``, then any ``options`` the URL
    itself gives (which come later and so win, for a setting the URL names)."""
    given = make_url(url).query.get("options")
    extra = [given] if isinstance(given, str) else list(given or ())
    return " ".join([timeouts.pg_options(), SESSION_SETTINGS, *extra])


def _sqlite_engine(url: str, begin: str, timeouts: DatabaseTimeouts) -> Engine:
    busy_ms = timeouts.sqlite_busy_timeout_ms
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": busy_ms / 1000}, hide_parameters=True
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own is deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: an acknowledged write survives power loss, not only a process crash.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        cursor.close()

    begin_statement = Prepared(text(begin))  # every write transaction's first statement

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        begin_statement.execute(connection)

    return engine
