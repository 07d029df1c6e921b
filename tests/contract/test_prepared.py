"""store.prepared: hot-path statements compiled once and run on the driver's cursor
behave as SQLAlchemy's own execution would, on both engines: every list length, constants
of the statement, type processing, row counts, listeners, and errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    create_engine,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from coordinator.store.prepared import _MAX_SHAPES, Prepared

metadata = MetaData()
items = Table(
    "prepared_items",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("n", Integer, nullable=False),
    Column("flag", Boolean, nullable=False),
    Column("blob", LargeBinary, nullable=True),
)

BY_IDS = Prepared(select(items).where(items.c.id.in_(bindparam("ids", expanding=True))).order_by(items.c.id))
INSERT = Prepared(insert(items))
BUMP = Prepared(
    update(items)
    .where(items.c.id == bindparam("g_id"), items.c.n == bindparam("g_n"))
    .values(n=bindparam("v_n"))
)
FLAG = Prepared(update(items).where(items.c.id == bindparam("g_id")).values(flag=True))


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        yield engine
    finally:
        metadata.drop_all(engine)
        engine.dispose()


def _rows(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"id-{i:03}", "n": i, "flag": i % 2 == 0, "blob": bytes([i]) if i % 3 else None}
        for i in range(count)
    ]


def test_rows_inserted_by_executemany_read_back_with_every_list_length(engine: Engine) -> None:
    with engine.begin() as conn:
        assert INSERT.executemany(conn, _rows(12)) == 12
        for length in (1, 2, 5, 12, 3):  # a shape per length, and a length seen before again
            wanted = [f"id-{i:03}" for i in range(length)]
            result = BY_IDS.execute(conn, {"ids": wanted})
            assert result.keys() == ("id", "n", "flag", "blob")
            rows = list(result)
            assert [row[0] for row in rows] == wanted
            assert [row[1] for row in rows] == list(range(length))
            assert [bool(row[2]) for row in rows] == [i % 2 == 0 for i in range(length)]
            assert [None if row[3] is None else bytes(row[3]) for row in rows] == [
                bytes([i]) if i % 3 else None for i in range(length)
            ]


def test_executemany_counts_only_the_rows_whose_guard_held(engine: Engine) -> None:
    with engine.begin() as conn:
        INSERT.executemany(conn, _rows(3))
        changed = BUMP.executemany(
            conn,
            [
                {"g_id": "id-000", "g_n": 0, "v_n": 10},
                {"g_id": "id-001", "g_n": 99, "v_n": 11},  # stale guard: no row
                {"g_id": "id-002", "g_n": 2, "v_n": 12},
            ],
        )
        assert changed == 2
        assert [row[1] for row in BY_IDS.execute(conn, {"ids": ["id-000", "id-001", "id-002"]})] == [
            10,
            1,
            12,
        ]


def test_a_constant_of_the_statement_is_sent_with_its_type(engine: Engine) -> None:
    with engine.begin() as conn:
        INSERT.executemany(conn, _rows(2))
        assert FLAG.executemany(conn, [{"g_id": "id-001"}]) == 1
        flags = {row[0]: bool(row[2]) for row in BY_IDS.execute(conn, {"ids": ["id-000", "id-001"]})}
    assert flags == {"id-000": True, "id-001": True}


def test_listeners_hear_every_statement_with_its_parameters(engine: Engine) -> None:
    heard: list[tuple[str, Any, bool]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        heard.append((statement, parameters, many))

    event.listen(engine, "before_cursor_execute", record)
    try:
        with engine.begin() as conn:
            INSERT.executemany(conn, _rows(2))
            BY_IDS.execute(conn, {"ids": ["id-000", "id-001"]})
    finally:
        event.remove(engine, "before_cursor_execute", record)
    sent = [(statement.split()[0], many) for statement, _, many in heard if "prepared_items" in statement]
    assert sent == [("INSERT", True), ("SELECT", False)]
    assert len(heard[-1][1]) == 2  # the two IDs of the IN list, expanded


def test_a_driver_error_is_sqlalchemys_and_the_transaction_rolls_back(engine: Engine) -> None:
    with pytest.raises(IntegrityError), engine.begin() as conn:
        INSERT.executemany(conn, _rows(1))
        INSERT.executemany(conn, _rows(1))  # the same primary key again
    with engine.connect() as conn:
        assert list(BY_IDS.execute(conn, {"ids": ["id-000"]})) == []
        # The connection went back to the pool usable.
        assert conn.execute(select(items.c.id)).all() == []


def test_a_statement_rendered_per_value_is_refused() -> None:
    literal = Prepared(select(items).where(items.c.n == bindparam("n", literal_execute=True)))
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.connect() as conn, pytest.raises(ValueError, match="rendered per parameter value"):
        literal.execute(conn, {"n": 1})


def test_an_insert_missing_a_column_the_statement_would_default_is_refused() -> None:
    defaulted = Table(
        "prepared_defaulted",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("x", Integer, default=lambda: 7),
    )
    engine = create_engine("sqlite://")
    defaulted.metadata.create_all(engine)
    with engine.connect() as conn, pytest.raises(ValueError, match="not among"):
        Prepared(insert(defaulted)).executemany(conn, [{"id": 1}])


def test_renderings_per_list_length_are_bounded_and_stay_right(engine: Engine) -> None:
    """One rendering per IN-list length seen, at most ``_MAX_SHAPES`` of them kept: a
    long-running coordinator's memory stays flat, and a dropped one is made again."""
    by_ids = Prepared(select(items.c.id).where(items.c.id.in_(bindparam("ids", expanding=True))))
    with engine.begin() as conn:
        INSERT.executemany(conn, _rows(150))
        for length in [*range(1, 150), 3, 149]:
            wanted = [f"id-{i:03}" for i in range(length)]
            assert sorted(by_ids.execute(conn, {"ids": wanted}).scalars()) == wanted
        (compiled,) = by_ids._by_dialect.values()
        assert 0 < len(compiled.shapes) <= _MAX_SHAPES
