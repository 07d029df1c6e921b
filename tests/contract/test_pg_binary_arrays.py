"""The batched writes' arrays as ``store.pg_binary_arrays`` encodes them, read back by
PostgreSQL itself: every element type with and without NULLs, empty arrays, the edges
of each type; a value its column cannot hold is the driver's error, not a crash."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, LargeBinary, String, Text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from coordinator.store import pg_binary_arrays

pytestmark = pytest.mark.postgres

_PG = postgresql.dialect()  # type: ignore[no-untyped-call]
Conn = psycopg.Connection[Any]


@pytest.fixture
def connection(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    url = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url) as conn:
        pg_binary_arrays.register(conn)
        yield conn


def _round_trip(conn: Conn, column_type: Any, sql_type: str, values: list[Any]) -> list[Any]:
    typed = pg_binary_arrays.typed(column_type.dialect_impl(_PG), values)
    row = conn.execute(f"SELECT CAST(%b AS {sql_type}[])", [typed]).fetchone()
    assert row is not None
    return list(row[0])


CASES = [
    (BigInteger(), "BIGINT", [0, 1, -1, 2**63 - 1, -(2**63), 1_796_351_622_635]),
    (Integer(), "INTEGER", [0, 7, -7, 2**31 - 1, -(2**31)]),
    (Boolean(), "BOOLEAN", [True, False, True]),
    (String(36), "VARCHAR(36)", ["", "plain", "ключ-🔑", 'quoted "{a,b}" \\ NULL', "NULL"]),
    (String(36, collation="C"), "VARCHAR(36)", ["b", "a"]),
    (Text(), "TEXT", ["x" * 10_000, "ユニーク"]),
    (LargeBinary(), "BYTEA", [b"", b"\x00\xff\xfe binary", bytes(range(256))]),
]


@pytest.mark.parametrize(("column_type", "sql_type", "values"), CASES, ids=[c[1] for c in CASES])
def test_every_value_comes_back_as_sent(
    connection: Conn, column_type: Any, sql_type: str, values: list[Any]
) -> None:
    assert _round_trip(connection, column_type, sql_type, values) == values


@pytest.mark.parametrize(("column_type", "sql_type", "values"), CASES, ids=[c[1] for c in CASES])
def test_nulls_keep_their_places(
    connection: Conn, column_type: Any, sql_type: str, values: list[Any]
) -> None:
    with_nulls = [None, *values[:2], None]
    assert _round_trip(connection, column_type, sql_type, with_nulls) == with_nulls
    assert _round_trip(connection, column_type, sql_type, [None]) == [None]


@pytest.mark.parametrize(("column_type", "sql_type", "values"), CASES, ids=[c[1] for c in CASES])
def test_an_empty_array_is_empty(
    connection: Conn, column_type: Any, sql_type: str, values: list[Any]
) -> None:
    assert _round_trip(connection, column_type, sql_type, []) == []


def test_unnest_reads_the_arrays_as_columns(connection: psycopg.Connection[Any]) -> None:
    ids = pg_binary_arrays.typed(String(36).dialect_impl(_PG), ["a", "b", None])
    counts = pg_binary_arrays.typed(BigInteger().dialect_impl(_PG), [1, None, 3])
    rows = connection.execute(
        "SELECT * FROM unnest(CAST(%b AS VARCHAR(36)[]), CAST(%b AS BIGINT[])) AS v(id, n)", [ids, counts]
    ).fetchall()
    assert rows == [("a", 1), ("b", None), (None, 3)]


@pytest.mark.parametrize(
    ("column_type", "value"),
    [
        (BigInteger(), 2**63),
        (Integer(), 2**31),
        (BigInteger(), "12"),
        (String(36), 12),
        (LargeBinary(), "text"),
    ],
    ids=["bigint too large", "integer too large", "text for a number", "number for text", "text for bytes"],
)
def test_a_value_the_column_cannot_hold_is_a_driver_error(
    connection: psycopg.Connection[Any], column_type: Any, value: Any
) -> None:
    with pytest.raises(psycopg.DataError, match="cannot send a value as"):
        _round_trip(connection, column_type, "TEXT", [value, value])
    with pytest.raises(psycopg.DataError, match="cannot send a value as"):
        _round_trip(connection, column_type, "TEXT", [None, value])


def test_another_type_stays_a_list_for_the_driver() -> None:
    for column_type in (Float(), JSON()):
        assert pg_binary_arrays.typed(column_type.dialect_impl(_PG), [1, 2]) == [1, 2]
