"""Canaries for the two private names of third-party packages the hot path uses, and the
pins that keep them: SQLAlchemy's ``Connection._handle_dbapi_exception``
(``store.prepared`` wraps driver errors with it, as ``Connection.execute`` does) and
psycopg's ``_queries`` parse cache (``store.pg_parsing`` enlarges it). A release that
drops or changes one fails here, naming the symbol, before the coordinator misbehaves."""

from __future__ import annotations

import inspect
import sqlite3
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy
from packaging.requirements import Requirement
from packaging.version import Version
from psycopg import _queries
from psycopg.adapt import Transformer
from sqlalchemy.engine import Connection

from coordinator.store import pg_parsing, prepared

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = "Connection._handle_dbapi_exception"
"""The name ``store.prepared._run`` calls."""


@pytest.fixture
def sqlite_connection(tmp_path: Path) -> Iterator[Connection]:
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'canary.db'}")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def test_sqlalchemy_still_has_the_private_method_prepared_calls() -> None:
    assert hasattr(Connection, "_handle_dbapi_exception"), (
        f"SQLAlchemy {sqlalchemy.__version__} has no {PRIVATE}, which coordinator/store/prepared.py "
        "calls to wrap driver errors: replace that call before allowing this version"
    )
    parameters = list(inspect.signature(Connection._handle_dbapi_exception).parameters)
    assert parameters[:6] == ["self", "e", "statement", "parameters", "cursor", "context"], (
        f"SQLAlchemy {sqlalchemy.__version__} changed the parameters of {PRIVATE} "
        f"(now {parameters}); coordinator/store/prepared.py passes them by position"
    )


def test_a_driver_error_of_a_prepared_run_comes_out_as_sqlalchemys_error(
    sqlite_connection: Connection,
) -> None:
    """What ``Connection.execute`` would raise: a ``DBAPIError`` holding the driver's error."""
    with pytest.raises(sqlalchemy.exc.DBAPIError) as raised:
        prepared.run_sql(sqlite_connection, "SELECT * FROM no_such_table", {})
    assert isinstance(raised.value.orig, sqlite3.OperationalError), (
        f"{PRIVATE} no longer wraps the driver's error as SQLAlchemy {sqlalchemy.__version__}'s "
        f"DBAPIError (got {raised.value!r})"
    )
    assert "no_such_table" in str(raised.value)


@pytest.fixture
def psycopg_parsing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """psycopg's parse cache as it was, back after the test (enlarging it is process-wide)."""
    for name in pg_parsing._NAMES:
        assert hasattr(_queries, name), (
            f"psycopg {psycopg.__version__} has no psycopg._queries.{name}, which "
            "coordinator/store/pg_parsing.py patches: its long statements would be parsed anew "
            "on every run (slower, not wrong); rework pg_parsing before allowing this version"
        )
        monkeypatch.setattr(_queries, name, getattr(_queries, name))
    yield


def _long_statement(values: int) -> tuple[str, dict[str, Any]]:
    names = [f"v{n}" for n in range(values)]
    return "SELECT " + " + ".join(f"%({name})s" for name in names), {name: n for n, name in enumerate(names)}


def test_psycopg_parses_through_the_module_cache_pg_parsing_enlarges(psycopg_parsing: None) -> None:
    assert pg_parsing.cache_every_statement()
    sql, params = _long_statement(400)
    assert len(sql) > 4_096 and len(params) > 50  # over psycopg's own limits
    before = _queries._query2pg.cache_info()
    for _ in range(2):
        _queries.PostgresQuery(Transformer()).convert(sql, params)
    after = _queries._query2pg.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1), (
        f"psycopg {psycopg.__version__}'s PostgresQuery.convert no longer reads "
        "psycopg._queries._query2pg and MAX_CACHED_STATEMENT_LENGTH/PARAMS when it runs, "
        "so coordinator/store/pg_parsing.py's patch does nothing"
    )


@pytest.mark.parametrize("distribution", ["sqlalchemy", "psycopg"])
def test_the_packages_with_private_names_are_pinned_to_a_minor_series(distribution: str) -> None:
    """An upper bound on a minor series (``<2.2``, not ``<3``), which the installed version
    is inside: a new minor release is allowed only once these canaries pass on it."""
    declared = []  # the SDK's pyproject.toml and the coordinator's (packaging/coordinator/)
    for pyproject in (ROOT / "pyproject.toml", ROOT / "packaging" / "coordinator" / "pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        declared += project["dependencies"] + [
            r for extra in project.get("optional-dependencies", {}).values() for r in extra
        ]
    # One requirement, however many extras repeat it (the outbox extra names SQLAlchemy too).
    (requirement,) = {Requirement(r) for r in declared if Requirement(r).name.lower() == distribution}
    uppers = [Version(s.version) for s in requirement.specifier if s.operator == "<"]
    assert [len(upper.release) for upper in uppers] == [2], f"{requirement}: no upper bound on a minor series"
    assert version(distribution) in requirement.specifier, (
        f"{distribution} {version(distribution)} vs {requirement}"
    )
