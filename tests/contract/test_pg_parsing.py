"""PostgreSQL: the coordinator's long statements are parsed by psycopg once per process
(``store.pg_parsing``), where psycopg alone parses anew every statement longer than
4,096 bytes or with more than 50 parameters: the enqueue's held insert and a batch's
reads by ID are such statements, on the hot path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import _queries

from coordinator.store import Store, pg_parsing

pytestmark = [pytest.mark.postgres, pytest.mark.perf]


@pytest.fixture
def store(postgres_url: str) -> Iterator[Store]:
    opened = Store.open(postgres_url)
    try:
        yield opened
    finally:
        opened.close()


def _long_statement(values: int) -> tuple[str, dict[str, Any]]:
    """A read with ``values`` parameters, well over psycopg's own limits."""
    names = [f"v{n}" for n in range(values)]
    sql = "SELECT " + " + ".join(f"CAST(%({name})s AS BIGINT)" for name in names) + " AS total"
    return sql, {name: n for n, name in enumerate(names)}


def test_a_long_statement_run_twice_is_parsed_once(store: Store) -> None:
    sql, params = _long_statement(400)
    assert len(sql.encode()) > 4_096 and len(params) > 50
    with store.write() as tx:
        driver = tx._connection.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        before = _queries._query2pg.cache_info()  # type: ignore[attr-defined]
        totals = [driver.execute(sql, params).fetchone() for _ in range(2)]
        after = _queries._query2pg.cache_info()  # type: ignore[attr-defined]
    assert totals == [(sum(range(400)),)] * 2
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


def test_raising_the_limits_again_changes_nothing() -> None:
    assert pg_parsing.cache_every_statement()
    cache = _queries._query2pg
    assert pg_parsing.cache_every_statement()
    assert _queries._query2pg is cache
    assert _queries.MAX_CACHED_STATEMENT_LENGTH >= pg_parsing.MAX_STATEMENT_BYTES
    assert _queries.MAX_CACHED_STATEMENT_PARAMS >= pg_parsing.MAX_STATEMENT_PARAMS
    assert cache.cache_info().maxsize == pg_parsing.CACHED_STATEMENTS  # type: ignore[attr-defined]


def test_without_psycopgs_attributes_it_leaves_parsing_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A psycopg release that names them otherwise: parsing stays as psycopg does it."""
    monkeypatch.delattr(_queries, "MAX_CACHED_STATEMENT_PARAMS")
    cache = _queries._query2pg
    assert not pg_parsing.cache_every_statement()
    assert _queries._query2pg is cache
