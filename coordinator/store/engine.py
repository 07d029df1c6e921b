"""Engines for both databases, with the settings each needs (SPEC §8)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def normalize_url(url: str) -> str:
    """Lets users write ``postgresql://`` and still get the psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


# Every engine is made with ``hide_parameters``: a failed statement's exception (and so
# any log line that prints it) must not carry the values it wrote, such as an attempt's
# exception text or a token hash.


def create_write_engine(url: str) -> Engine:
    """The engine for writes. On SQLite every transaction is ``BEGIN IMMEDIATE``: a
    deferred one fails with "database is locked" when it upgrades to a write."""
    url = normalize_url(url)
    if is_sqlite(url):
        return _sqlite_engine(url, "BEGIN IMMEDIATE")
    return create_engine(url, pool_size=5, max_overflow=5, pool_pre_ping=True, hide_parameters=True)


def create_read_engine(url: str, write_engine: Engine) -> Engine:
    """Reads on SQLite use deferred transactions so they never wait for the writer (WAL)."""
    url = normalize_url(url)
    if is_sqlite(url):
        return _sqlite_engine(url, "BEGIN")
    return write_engine


def _sqlite_engine(url: str, begin: str) -> Engine:
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True
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
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)

    return engine
