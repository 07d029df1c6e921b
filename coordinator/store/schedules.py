"""The store's schedule operations (R-18): rows to ``ScheduleRecord`` and back, the reads
(``Store.list_schedules`` and friends use them) and the writes of one transaction
(``Tx.schedules``). Schedule rows are locked on PostgreSQL like job rows, so replicas
passing over the same due schedule take turns (SKIP LOCKED) instead of waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from coordinator.domain.schedules import CatchUp, ScheduleRecord
from coordinator.store.errors import DuplicateKey
from coordinator.store.schema import schedule_skipped_ticks, schedules

_FIELDS = tuple(column.name for column in schedules.c)


def schedule_from_row(row: Any) -> ScheduleRecord:
    values = dict(row._mapping)
    values["payload"] = bytes(values["payload"])
    values["catch_up"] = CatchUp(values["catch_up"])
    values["paused"] = bool(values["paused"])
    return ScheduleRecord(**{name: values[name] for name in _FIELDS})


def schedule_row(record: ScheduleRecord) -> dict[str, Any]:
    row = {name: getattr(record, name) for name in _FIELDS}
    row["catch_up"] = record.catch_up.value
    return row


# -- reads -----------------------------------------------------------------------------


def get_schedule(conn: Connection, name: str) -> ScheduleRecord | None:
    row = conn.execute(select(schedules).where(schedules.c.name == name)).first()
    return schedule_from_row(row) if row is not None else None


def list_schedules(conn: Connection, *, after_name: str | None, limit: int) -> list[ScheduleRecord]:
    """By name, keyset-paged after ``after_name``."""
    query = select(schedules).order_by(schedules.c.name).limit(limit)
    if after_name is not None:
        query = query.where(schedules.c.name > after_name)
    return [schedule_from_row(row) for row in conn.execute(query)]


def newest_skipped_ticks(conn: Connection, names: Sequence[str], per_schedule: int) -> dict[str, list[int]]:
    """Per schedule, its newest ``per_schedule`` skipped ticks, newest first."""
    if not names:
        return {}
    rank = (
        func.row_number()
        .over(
            partition_by=schedule_skipped_ticks.c.schedule_name,
            order_by=schedule_skipped_ticks.c.tick_ms.desc(),
        )
        .label("rank")
    )
    ranked = (
        select(schedule_skipped_ticks.c.schedule_name, schedule_skipped_ticks.c.tick_ms, rank)
        .where(schedule_skipped_ticks.c.schedule_name.in_(sorted(set(names))))
        .subquery()
    )
    query = (
        select(ranked.c.schedule_name, ranked.c.tick_ms)
        .where(ranked.c.rank <= per_schedule)
        .order_by(ranked.c.schedule_name, ranked.c.tick_ms.desc())
    )
    found: dict[str, list[int]] = {}
    for name, tick_ms in conn.execute(query):
        found.setdefault(name, []).append(int(tick_ms))
    return found


def due_schedule_names(conn: Connection, now_ms: int, limit: int) -> list[str]:
    """Names of unpaused schedules whose next tick has come, the most overdue first."""
    query = (
        select(schedules.c.name)
        .where(schedules.c.paused.is_(False), schedules.c.next_tick_ms <= now_ms)
        .order_by(schedules.c.next_tick_ms, schedules.c.name)
        .limit(limit)
    )
    return [row[0] for row in conn.execute(query)]


# -- writes ----------------------------------------------------------------------------


class ScheduleWrites:
    """The schedule operations of one write transaction (``Tx.schedules``)."""

    def __init__(self, conn: Connection, postgres: bool) -> None:
        self._conn = conn
        self._postgres = postgres

    def _locked(self, query: Select[Any], skip_locked: bool = False) -> Select[Any]:
        if self._postgres:
            return query.with_for_update(skip_locked=skip_locked)
        return query

    def get(self, name: str) -> ScheduleRecord | None:
        """The schedule, its row locked until the transaction ends."""
        row = self._conn.execute(self._locked(select(schedules).where(schedules.c.name == name))).first()
        return schedule_from_row(row) if row is not None else None

    def due(self, name: str, now_ms: int) -> ScheduleRecord | None:
        """The schedule if it is still due and no other transaction holds it (SKIP LOCKED):
        a replica that finds it taken leaves it to the one that has it."""
        query = select(schedules).where(
            schedules.c.name == name, schedules.c.paused.is_(False), schedules.c.next_tick_ms <= now_ms
        )
        row = self._conn.execute(self._locked(query, skip_locked=True)).first()
        return schedule_from_row(row) if row is not None else None

    def insert(self, record: ScheduleRecord) -> None:
        """Raises DuplicateKey when the name is taken."""
        try:
            self._conn.execute(insert(schedules), [schedule_row(record)])
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    def update(self, record: ScheduleRecord) -> None:
        values = schedule_row(record)
        del values["name"]
        self._conn.execute(update(schedules).where(schedules.c.name == record.name).values(values))

    def delete(self, name: str) -> None:
        """Deletes the schedule and its skipped ticks (its jobs stay)."""
        self._conn.execute(
            delete(schedule_skipped_ticks).where(schedule_skipped_ticks.c.schedule_name == name)
        )
        self._conn.execute(delete(schedules).where(schedules.c.name == name))

    def add_skipped_ticks(self, name: str, ticks: Sequence[int], now_ms: int, keep: int) -> None:
        """Records ``ticks`` as skipped and drops the oldest beyond ``keep``."""
        if not ticks:
            return
        self._conn.execute(
            insert(schedule_skipped_ticks),
            [{"schedule_name": name, "tick_ms": tick, "recorded_at_ms": now_ms} for tick in ticks],
        )
        table = schedule_skipped_ticks
        oldest_kept = (
            select(table.c.tick_ms)
            .where(table.c.schedule_name == name)
            .order_by(table.c.tick_ms.desc())
            .offset(keep - 1)
            .limit(1)
            .scalar_subquery()
        )
        self._conn.execute(delete(table).where(table.c.schedule_name == name, table.c.tick_ms < oldest_kept))
