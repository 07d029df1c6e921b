"""The relay's statements on the outbox table: take a batch of pending rows (locked on
PostgreSQL, so relays share the work), delete the acknowledged ones, move a refused one
aside, and count what waits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Table, delete, func, select, update

from worker_sdk.outbox._table import MAX_ERROR_CHARS


@dataclass(frozen=True, slots=True)
class PendingRow:
    id: int
    job: bytes


@dataclass(frozen=True, slots=True)
class Backlog:
    """Rows waiting to be relayed, and the write time of the oldest (None: none wait)."""

    pending: int
    oldest_created_at_ms: int | None


def take_batch(conn: Connection, table: Table, limit: int) -> list[PendingRow]:
    """The oldest ``limit`` pending rows, in ID order. On PostgreSQL they stay locked
    until ``conn``'s transaction ends, and rows another relay holds are skipped; SQLite
    has no row locks (its dialect leaves the clause out): a second relay there may send
    the same rows, which the idempotency key makes harmless."""
    statement = (
        select(table.c.id, table.c.job)
        .where(table.c.failed_at_ms.is_(None))
        .order_by(table.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [PendingRow(int(row.id), bytes(row.job)) for row in conn.execute(statement)]


def delete_rows(conn: Connection, table: Table, ids: Sequence[int]) -> None:
    if ids:
        conn.execute(delete(table).where(table.c.id.in_(ids)))


def move_aside(conn: Connection, table: Table, row_id: int, error: str, now_ms: int) -> None:
    """Marks the row refused for good: it keeps its job for a person to look at, and
    relays pass over it."""
    conn.execute(
        update(table).where(table.c.id == row_id).values(failed_at_ms=now_ms, error=error[:MAX_ERROR_CHARS])
    )


def backlog(conn: Connection, table: Table) -> Backlog:
    statement = select(func.count(), func.min(table.c.created_at_ms)).where(table.c.failed_at_ms.is_(None))
    count, oldest = conn.execute(statement).one()
    return Backlog(int(count), None if oldest is None else int(oldest))
