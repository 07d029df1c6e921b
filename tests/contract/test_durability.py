"""The commit settings the store's connections run with (docs/durability.md): on SQLite,
WAL with ``synchronous=FULL`` on every connection the store opens; on PostgreSQL,
``synchronous_commit = on``, which the coordinator neither sets nor checks: it inherits
the server's default, and this shows the test server's connections get it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from coordinator.store import Store
from coordinator.store.engine import create_read_engine, create_write_engine

SQLITE_SYNCHRONOUS_FULL = 2
"""What ``PRAGMA synchronous`` reads for FULL."""


def test_sqlite_connections_use_wal_and_synchronous_full(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runwick.db'}"
    Store.open(url).close()  # creates and migrates the file
    write = create_write_engine(url)
    read = create_read_engine(url)
    try:
        for engine in (write, read):
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == SQLITE_SYNCHRONOUS_FULL
    finally:
        read.dispose()
        write.dispose()


@pytest.mark.postgres
def test_postgres_connections_commit_synchronously(postgres_url: str) -> None:
    """COMMIT returns only once the transaction's WAL is flushed (and, with synchronous
    standbys, received by them): what every acknowledgment relies on."""
    # The store's own write engine (``Store`` has no public way to run SQL).
    engine = create_write_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_synchronous_commit_can_be_pinned_in_the_database_url(postgres_url: str) -> None:
    """The way docs/durability.md gives to pin the setting whatever the database and role
    say: ``options`` in the URL reaches the server on every connection. (``remote_apply``
    only shows the value arrived; without standbys it commits as ``on`` does.)"""
    url = make_url(postgres_url).update_query_dict({"options": "-csynchronous_commit=remote_apply"})
    engine = create_write_engine(url.render_as_string(hide_password=False))
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "remote_apply"
            source = "SELECT source FROM pg_settings WHERE name = 'synchronous_commit'"
            assert conn.exec_driver_sql(source).scalar() == "client"
    finally:
        engine.dispose()
