"""Alembic environment: runs on the engine the coordinator passes in."""

from __future__ import annotations

from alembic import context

from coordinator.store.schema import metadata

engine = context.config.attributes["engine"]
with engine.begin() as connection:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    context.run_migrations()
