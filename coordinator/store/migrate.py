"""Schema migrations with alembic, configured in code (no alembic.ini to ship)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

SCRIPT_LOCATION = Path(__file__).parent / "alembic"
MIGRATION_LOCK_KEY = 0x72756E7769636B
"""The PostgreSQL advisory lock every migration holds ("runwick" in ASCII)."""
DEFAULT_LOCK_WAIT_MS = 600_000


class SchemaNotCurrent(Exception):
    """The database's schema is missing or older than this coordinator needs."""


class MigrationLocked(Exception):
    """Another migration held the schema lock for longer than this one would wait."""


def _config(engine: Engine | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head", *, lock_wait_ms: int = DEFAULT_LOCK_WAIT_MS) -> None:
    """Brings the schema to ``revision``, by default the newest (idempotent). On
    PostgreSQL it first waits up to ``lock_wait_ms`` (0: no limit) while another
    migration runs, then raises MigrationLocked."""
    config = _config(engine)
    config.attributes["lock_wait_ms"] = lock_wait_ms
    command.upgrade(config, revision)  # logs the change, if any (alembic/env.py)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def require_current(engine: Engine) -> None:
    """Raises SchemaNotCurrent, saying what to run, unless the schema is at head."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaNotCurrent(
            f"database schema is at revision {current or 'none'}, this coordinator needs {head}: "
            "run `runwick migrate --database-url ...` first"
        )
