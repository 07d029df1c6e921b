"""Migration 0019 on a database at 0016 that holds audit events: afterwards TRUNCATE of
the audit log is refused on PostgreSQL and the events stay; the downgrade takes only
that trigger away. On SQLite (no TRUNCATE) it changes nothing, both ways."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade


def _events(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM audit_events")).scalar_one())


def _insert_event(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO audit_events (at_ms, actor_name, action, target, peer)"
                " VALUES (1, 'ops', 'token.create', 't', 'ipv4:127.0.0.1:1')"
            )
        )


def _empty(engine: Engine) -> None:
    statement = "TRUNCATE audit_events" if engine.dialect.name == "postgresql" else "DELETE FROM audit_events"
    with engine.begin() as conn:
        conn.execute(text(statement))


def test_0019_refuses_truncate_of_the_audit_log_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0018_dashboard_sessions")
        _insert_event(engine)

        upgrade(engine, "0019_audit_truncate")

        with pytest.raises(DBAPIError, match="append-only"):
            _empty(engine)
        assert _events(engine) == 1

        command.downgrade(_config(engine), "0018_dashboard_sessions")
        if engine.dialect.name == "postgresql":
            _empty(engine)  # what 0019 refuses, and only that, is allowed again
            assert _events(engine) == 0
        else:
            with pytest.raises(DBAPIError, match="append-only"):
                _empty(engine)
    finally:
        engine.dispose()
