"""Counts the rows each transaction inserts, updates and deletes, per table, as the database
sees them: row triggers on every table append to a log table, so statements sent as one
(PostgreSQL's held writes, ``store.pg_held``) are counted row by row like any other.

Only for a scratch database of its own (the triggers stay until it is dropped): the
table ``docs/durability.md`` gives for one job's life is what ``test_rows_per_job``
counts with it.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.pool import NullPool

LOG = "row_change_log"
Changes = dict[str, dict[str, int]]
"""Rows changed per table, then per operation (``INSERT``, ``UPDATE``, ``DELETE``)."""

_PG_FUNCTION = f"""
CREATE FUNCTION count_row_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {LOG} (tx, tbl, op) VALUES (txid_current(), TG_TABLE_NAME, TG_OP);
    RETURN NULL;
END $$
"""


class RowChanges:
    """The log of one database's row changes, read (and emptied) step by step."""

    def __init__(self, url: str) -> None:
        self._engine = create_engine(url, poolclass=NullPool)
        self._postgres = self._engine.dialect.name == "postgresql"
        with self._engine.begin() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t != "alembic_version"]
            if self._postgres:
                conn.execute(
                    text(f"CREATE TABLE {LOG} (id bigserial PRIMARY KEY, tx bigint, tbl text, op text)")
                )
                conn.execute(text(_PG_FUNCTION))
                for table in tables:
                    conn.execute(
                        text(
                            f"CREATE TRIGGER count_{table} AFTER INSERT OR UPDATE OR DELETE ON {table} "
                            "FOR EACH ROW EXECUTE FUNCTION count_row_change()"
                        )
                    )
            else:
                conn.execute(text(f"CREATE TABLE {LOG} (id INTEGER PRIMARY KEY, tbl TEXT, op TEXT)"))
                for table in tables:
                    for op in ("INSERT", "UPDATE", "DELETE"):
                        conn.execute(
                            text(
                                f"CREATE TRIGGER count_{table}_{op.lower()} AFTER {op} ON {table} "
                                f"BEGIN INSERT INTO {LOG} (tbl, op) VALUES ('{table}', '{op}'); END"
                            )
                        )

    def take(self) -> tuple[Changes, int | None]:
        """The rows changed since the last call, and on PostgreSQL in how many
        transactions (None on SQLite, which has no transaction IDs to tell them apart)."""
        with self._engine.begin() as conn:
            rows = conn.execute(text(f"SELECT * FROM {LOG} ORDER BY id")).mappings().all()
            conn.execute(text(f"DELETE FROM {LOG}"))
        counted: Counter[tuple[str, str]] = Counter((row["tbl"], row["op"]) for row in rows)
        changes: Changes = {}
        for (table, op), count in sorted(counted.items()):
            changes.setdefault(table, {})[op] = count
        transactions = len({row["tx"] for row in rows}) if self._postgres else None
        return changes, transactions

    def close(self) -> None:
        self._engine.dispose()


def total(changes: Changes) -> int:
    return sum(sum(ops.values()) for ops in changes.values())


def as_markdown(steps: dict[str, Changes]) -> str:
    """The steps' changes as the table ``docs/durability.md`` shows."""
    lines = ["| step | rows written | total |", "| --- | --- | --- |"]
    for step, changes in steps.items():
        cells = "; ".join(
            f"`{table}` " + ", ".join(f"{n} {op.lower()}" for op, n in ops.items())
            for table, ops in changes.items()
        )
        lines.append(f"| {step} | {cells} | {total(changes)} |")
    return "\n".join(lines)
