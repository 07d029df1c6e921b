"""Schema: migrations produce exactly the SQLAlchemy metadata on both engines, with the
partial indexes docs/scaling.md asks for; an unmigrated database is refused with the command to
run (``runwick migrate``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, String, create_engine, inspect, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from coordinator.store import Store
from coordinator.store.engine import normalize_url
from coordinator.store.migrate import SchemaNotCurrent, head_revision
from coordinator.store.schema import metadata

from .harness import Harness

_POSTGRES = postgresql.dialect()  # type: ignore[no-untyped-call]


@pytest.fixture
def engine(database_url: str, store: Store) -> Iterator[Engine]:
    """A plain engine on the migrated database (``store`` migrated it)."""
    plain = create_engine(normalize_url(database_url))
    yield plain
    plain.dispose()


def test_migrated_schema_matches_the_metadata(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
        assert context.get_current_revision() == head_revision()


def collated_columns() -> set[tuple[str, str]]:
    """The ``(table, column)`` pairs the metadata collates ``"C"`` on PostgreSQL."""
    return {
        (table.name, column.name)
        for table in metadata.tables.values()
        for column in table.columns
        if getattr(column.type.dialect_impl(_POSTGRES), "collation", None) == "C"
    }


def database_collations(engine: Engine) -> dict[tuple[str, str], str | None]:
    """Each text column's collation as the database has it (None: the database's own;
    SQLite's columns all compare byte by byte and name none)."""
    if engine.dialect.name != "postgresql":
        schema = inspect(engine)
        return {
            (table, column["name"]): column.get("collation")
            for table in schema.get_table_names()
            for column in schema.get_columns(table)
            if isinstance(column["type"], String)
        }
    query = text(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND data_type IN ('character varying', 'text')"
    )
    with engine.connect() as conn:
        return {(table, column): collation for table, column, collation in conn.execute(query)}


def test_identifier_columns_compare_byte_by_byte(engine: Engine) -> None:
    """IDs, names, queues and states compare as bytes on both engines: on PostgreSQL
    collated "C" (no strcoll in every index comparison, and the order SQLite has)."""
    collated = collated_columns()
    assert {("jobs", "id"), ("jobs", "queue"), ("attempts", "job_id"), ("transitions", "job_id")} <= collated
    found = database_collations(engine)
    if engine.dialect.name == "postgresql":
        assert {column for column, collation in found.items() if collation == "C"} == collated
    else:  # no column names a collation: SQLite's own compares bytes
        assert ("jobs", "id") in found and set(found.values()) == {None}


# PostgreSQL's alone: SQLite has no fill factor.
@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_updated_tables_leave_room_on_their_pages(engine: Engine) -> None:
    """docs/scaling.md: on PostgreSQL the jobs' pages keep a fifth free (heartbeats stay
    HOT updates) and the attempts' half (their start and end stay HOT updates)."""
    query = text("SELECT relname, reloptions FROM pg_class WHERE relname IN ('jobs', 'attempts')")
    with engine.connect() as conn:
        options = {name: set(found or ()) for name, found in conn.execute(query)}
    assert "fillfactor=80" in options["jobs"]
    assert options["attempts"] == {"fillfactor=50"}


def test_claim_and_idempotency_indexes_are_partial(engine: Engine) -> None:
    """docs/scaling.md: the claim index covers only claimable rows, in claim order; the
    idempotency key is unique only where set; nothing indexes the lease (HOT heartbeats)."""
    indexes = {ix["name"]: ix for ix in inspect(engine).get_indexes("jobs")}
    where = f"{engine.dialect.name}_where"

    claim = indexes["ix_jobs_claim"]
    assert claim["column_names"] == ["queue", "priority", "run_at_ms", "id"]
    assert where in claim["dialect_options"]
    assert "available" in str(claim["dialect_options"][where])
    unique_key = indexes["ux_jobs_idempotency_key"]
    assert unique_key["unique"] and where in unique_key["dialect_options"]
    indexed_columns = {c for ix in indexes.values() for c in ix["column_names"]}
    assert "lease_expires_at_ms" not in indexed_columns


def test_opening_again_migrates_idempotently_and_keeps_the_data(database_url: str, harness: Harness) -> None:
    job_id = harness.enqueue()

    reopened = Store.open(database_url, create=True)
    try:
        assert reopened.get_job(job_id) == harness.job(job_id)
    finally:
        reopened.close()


def test_an_unmigrated_database_is_refused_with_the_command_to_run(unmigrated_url: str) -> None:
    with pytest.raises(SchemaNotCurrent) as raised:
        Store.open(unmigrated_url, create=False)

    assert "runwick migrate" in str(raised.value)
    assert f"needs {head_revision()}" in str(raised.value)
    plain = create_engine(normalize_url(unmigrated_url))
    try:
        assert inspect(plain).get_table_names() == []  # refused without creating anything
    finally:
        plain.dispose()


def test_migrating_an_empty_database_makes_it_current(unmigrated_url: str) -> None:
    Store.open(unmigrated_url, create=True).close()

    store = Store.open(unmigrated_url, create=False)  # what `runwick serve` does afterwards
    store.close()
    plain = create_engine(normalize_url(unmigrated_url))
    try:
        with plain.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        plain.dispose()


def test_only_sqlite_is_created_on_open_by_default(unmigrated_url: str) -> None:
    """SQLite is created on first open; PostgreSQL must be migrated explicitly
    (``runwick migrate``)."""
    if make_url(unmigrated_url).get_backend_name() == "sqlite":
        Store.open(unmigrated_url).close()
        plain = create_engine(normalize_url(unmigrated_url))
        try:
            assert {"jobs", "attempts", "transitions"} <= set(inspect(plain).get_table_names())
        finally:
            plain.dispose()
        return
    with pytest.raises(SchemaNotCurrent, match="runwick migrate"):
        Store.open(unmigrated_url)
