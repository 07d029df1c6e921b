"""The jobs search (``domain.search``) and the bulk operations' count, as bounded reads.

Every statement here reads a bounded number of rows whatever the size of the table: the
indexed part of a search walks an index in ID order; what no index answers is applied
to a window of at most ``scan_limit`` of those rows (an inner ``LIMIT`` applied before
the other filters, so the limit bounds what is read, not only what is returned); the
idempotency-key search probes the per-queue key index once per queue.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, LargeBinary, bindparam, case, func, select, text

from coordinator.domain.records import JobRecord
from coordinator.domain.search import PREFIX_END, JobSearch, SortKey, id_floor
from coordinator.domain.states import JobState
from coordinator.store.rows import job_from_mapping
from coordinator.store.schema import jobs, queue_count_deltas, queue_counts, queues

_LIST_COLUMNS = [c for c in jobs.c if c.name not in ("payload", "output")]
WINDOW = "search_window"
"""The window subquery's name, which the payload test names in its SQL."""
_QUEUE_CHUNK = 500
"""Queue names per IN list of the key probe: well under every engine's parameter limit."""
_SORT_COLUMNS = {
    SortKey.CREATED: jobs.c.id,
    SortKey.RUN_AT: jobs.c.run_at_ms,
    SortKey.FINISHED: jobs.c.finished_at_ms,
}


@dataclass(frozen=True, slots=True)
class SearchRows:
    jobs: list[JobRecord]
    """Up to ``limit`` + 1 matches, in the search's order."""
    scanned: int
    """Rows in the window (0 without one)."""
    last_scanned_id: str | None
    """The window's last ID in ID order (created sort): where the next window starts."""


def search_jobs(
    conn: Connection,
    search: JobSearch,
    *,
    after_id: str | None,
    offset: int,
    limit: int,
    scan_limit: int,
    text_head_bytes: int,
) -> SearchRows:
    """Up to ``limit`` + 1 jobs of ``search`` after the job ``after_id`` (created sort)
    or after ``offset`` matches of the window (other sorts); payloads left out."""
    if search.idempotency_key is not None:
        return SearchRows(_by_idempotency_key(conn, search, limit, text_head_bytes), 0, None)
    indexed = _indexed_conditions(search)
    by_id = search.sort is SortKey.CREATED
    descending_ids = search.descending or not by_id
    if by_id and after_id is not None:
        indexed.append(jobs.c.id < after_id if search.descending else jobs.c.id > after_id)
    id_order = jobs.c.id.desc() if descending_ids else jobs.c.id.asc()
    if not search.needs_window and search.created_after_ms is None and search.created_before_ms is None:
        rows = conn.execute(select(*_LIST_COLUMNS).where(*indexed).order_by(id_order).limit(limit + 1))
        return SearchRows([_listed(row) for row in rows], 0, None)
    # The window carries the listed columns (and the payload's head, for a text search)
    # and every other test is made on it: with ``id IN (window)`` PostgreSQL planned a
    # scan of the whole table to join the window back (0.8 s on 300,000 jobs).
    carried: list[Any] = [*_LIST_COLUMNS]
    if search.text is not None:
        carried.append(func.substr(jobs.c.payload, 1, text_head_bytes).label("payload_head"))
    window = select(*carried).where(*indexed).order_by(id_order).limit(scan_limit).subquery(WINDOW)
    # Its size and ends from the IDs alone (an index-only read on both engines).
    ids = select(jobs.c.id).where(*indexed).order_by(id_order).limit(scan_limit).subquery()
    scanned, low, high = conn.execute(select(func.count(), func.min(ids.c.id), func.max(ids.c.id))).one()
    column = window.c[_SORT_COLUMNS[search.sort].name]
    order = column.desc().nulls_last() if search.descending else column.asc().nulls_last()
    query = (
        select(*(window.c[c.name] for c in _LIST_COLUMNS))
        .where(*_window_conditions(conn, search, window.c, f"{WINDOW}.payload_head"))
        .order_by(order, window.c.id.desc() if search.descending else window.c.id.asc())
        .limit(limit + 1)
        .offset(offset)
    )
    found = [_listed(row) for row in conn.execute(query)]
    return SearchRows(found, int(scanned), low if descending_ids else high)


def _indexed_conditions(search: JobSearch) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if search.queue is not None:
        conditions.append(jobs.c.queue == search.queue)
    if search.state is not None:
        conditions.append(jobs.c.state == search.state.value)
    if search.wire_name is not None:
        conditions.append(jobs.c.wire_name == search.wire_name)
    if search.id_prefix is not None:
        conditions += [jobs.c.id >= search.id_prefix, jobs.c.id < search.id_prefix + PREFIX_END]
    if search.created_after_ms is not None:
        conditions.append(jobs.c.id >= id_floor(search.created_after_ms))
    if search.created_before_ms is not None:
        conditions.append(jobs.c.id < id_floor(search.created_before_ms))
    return conditions


def _window_conditions(conn: Connection, search: JobSearch, columns: Any, payload_head: str) -> list[Any]:
    """The exact tests applied to the window's rows (or to the key probe's few):
    ``columns`` are theirs, ``payload_head`` the SQL of the payload's head among them."""
    conditions: list[Any] = []
    if search.unique_key is not None:
        conditions.append(columns.unique_key == search.unique_key)
    if search.created_after_ms is not None:
        conditions.append(columns.created_at_ms >= search.created_after_ms)
    if search.created_before_ms is not None:
        conditions.append(columns.created_at_ms < search.created_before_ms)
    if search.finished_after_ms is not None:
        conditions.append(columns.finished_at_ms >= search.finished_after_ms)
    if search.finished_before_ms is not None:
        conditions.append(columns.finished_at_ms < search.finished_before_ms)
    if search.text is not None:
        conditions.append(_payload_contains(conn, search.text.encode(), payload_head))
    return conditions


def _payload_contains(conn: Connection, needle: bytes, payload_head: str) -> Any:
    """``payload_head`` (SQL: the start of a payload) contains ``needle``, byte for byte.
    Each engine has its own spelling for a search in binary data (SQLite's ``instr``
    works on blobs, PostgreSQL's ``position`` on bytea); neither treats any byte as a
    wildcard."""
    if conn.dialect.name == "postgresql":
        statement = f"position(:needle IN {payload_head}) > 0"
    else:
        statement = f"instr({payload_head}, :needle) > 0"
    return text(statement).bindparams(bindparam("needle", needle, type_=LargeBinary))


def _by_idempotency_key(
    conn: Connection, search: JobSearch, limit: int, text_head_bytes: int
) -> list[JobRecord]:
    """Keys are unique per queue: one probe of ``ux_jobs_idempotency_key`` per queue (the
    one searched, or every known queue in chunks) finds at most one job each."""
    names: Sequence[str]
    if search.queue is not None:
        names = [search.queue]
    else:
        names = list(conn.execute(select(queues.c.name).order_by(queues.c.name)).scalars())
    # The queue is probed below; every other field only filters the few rows found.
    others = [*_indexed_conditions(dataclasses.replace(search, queue=None))]
    head = f"substr(jobs.payload, 1, {int(text_head_bytes)})"
    others += _window_conditions(conn, search, jobs.c, head)
    found: list[JobRecord] = []
    for start in range(0, len(names), _QUEUE_CHUNK):
        chunk = names[start : start + _QUEUE_CHUNK]
        query = select(*_LIST_COLUMNS).where(
            jobs.c.queue.in_(chunk), jobs.c.idempotency_key == search.idempotency_key, *others
        )
        found += [_listed(row) for row in conn.execute(query)]
        if len(found) > limit:
            break
    key = _SORT_COLUMNS[search.sort].name
    # Unset times last either way, as the window's NULLS LAST orders them.
    ordered = sorted((j for j in found if getattr(j, key) is not None), key=lambda j: (getattr(j, key), j.id))
    if search.descending:
        ordered.reverse()
    return [*ordered, *(j for j in found if getattr(j, key) is None)][: limit + 1]


def _listed(row: Any) -> JobRecord:
    return job_from_mapping({**row._mapping, "payload": b"", "output": None})


def count_for_bulk(
    conn: Connection,
    *,
    queue: str | None,
    states: Sequence[JobState],
    wire_name: str | None,
    cap: int,
) -> tuple[int, bool]:
    """How many jobs a bulk operation over this filter would select now, and whether the
    count is partial. Without a wire name it is the maintained queue counts (exact, no
    job read); with one, the matches among the newest ``cap`` jobs of that wire name
    (partial when there were ``cap`` of them): a bounded walk of its index."""
    wanted = [state.value for state in states]
    if wire_name is None:
        total = 0
        for table, column in (
            (queue_counts, queue_counts.c.count),
            (queue_count_deltas, queue_count_deltas.c.delta),
        ):
            query = select(func.coalesce(func.sum(column), 0)).where(table.c.state.in_(wanted))
            if queue is not None:
                query = query.where(table.c.queue == queue)
            total += int(conn.execute(query).scalar_one())
        return total, False
    newest = (
        select(jobs.c.queue, jobs.c.state)
        .where(jobs.c.wire_name == wire_name)
        .order_by(jobs.c.id.desc())
        .limit(cap)
        .subquery()
    )
    matching = func.sum(case((newest.c.state.in_(wanted), 1), else_=0))
    if queue is not None:
        matching = func.sum(case(((newest.c.state.in_(wanted)) & (newest.c.queue == queue), 1), else_=0))
    scanned, counted = conn.execute(select(func.count(), func.coalesce(matching, 0))).one()
    return int(counted), int(scanned) >= cap
