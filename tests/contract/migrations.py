"""What every migration test ends with: the database upgraded to the head revision, with
the schema the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from coordinator.store.migrate import current_revision, head_revision, upgrade
from coordinator.store.schema import metadata


def upgrade_to_head_matching_the_models(engine: Engine) -> None:
    """Upgrades ``engine``'s database to the head revision and checks that its schema is
    what ``store.schema.metadata`` describes (tables, columns and indexes)."""
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
