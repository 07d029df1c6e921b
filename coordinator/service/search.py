"""The jobs search and the bulk operations' count, each input checked before any read.

Every refusal is InvalidArgument naming the field and the value, and reads nothing. A
page's cursor is opaque to the dashboard's visitors but plain: a job ID (a search sorted
by creation time continues after that job) or a whole number (a search sorted otherwise
continues after that many matches of its window).
"""

from __future__ import annotations

import dataclasses

from coordinator.config import DashboardLimits
from coordinator.domain.ids import parse_id
from coordinator.domain.search import (
    MAX_KEY_CHARS,
    MAX_TEXT_CHARS,
    JobSearch,
    SearchPage,
    SortKey,
    canonical_id_prefix,
)
from coordinator.domain.states import JobState
from coordinator.errors import InvalidArgument
from coordinator.service.bulk import JobFilter, check_filter
from coordinator.store import Store
from coordinator.validation import check_name, quote


class JobSearchService:
    def __init__(self, store: Store, limits: DashboardLimits) -> None:
        self.store = store
        self.limits = limits

    def search(self, search: JobSearch, *, page_size: int, cursor: str) -> SearchPage:
        """One page of ``search`` (``page_size`` clamped to ``max_page_size``) and where
        the next starts. Raises InvalidArgument for a bad field or cursor."""
        search = self.checked(search)
        size = self.store.bounds.clamp_page_size(page_size)
        by_id = search.sort is SortKey.CREATED
        after_id, offset = _cursor(cursor, by_id, self.limits.search_window_jobs)
        window = self.limits.search_text_window_jobs if search.text else self.limits.search_window_jobs
        rows = self.store.search_jobs(
            search,
            after_id=after_id,
            offset=offset,
            limit=size,
            scan_limit=window,
            text_head_bytes=self.limits.search_text_head_bytes,
        )
        windowed = rows.last_scanned_id is not None or rows.scanned > 0
        full = windowed and rows.scanned >= window
        page = rows.jobs[:size]
        if len(rows.jobs) > size:
            next_cursor = page[-1].id if by_id else str(offset + size)
        elif by_id and full and rows.last_scanned_id is not None:
            next_cursor = rows.last_scanned_id  # nothing more in this window: read the next
        else:
            next_cursor = ""
        return SearchPage(page, next_cursor, window if windowed else None, full)

    def checked(self, search: JobSearch) -> JobSearch:
        """``search`` with its ID prefix in canonical form; InvalidArgument for a field
        that is not one a search takes."""
        bounds = self.store.bounds
        if search.queue is not None:
            check_name("queue", search.queue)
        if search.wire_name is not None:
            check_name("wire_name", search.wire_name, max_length=bounds.max_wire_name_length)
        prefix = search.id_prefix
        if prefix is not None:
            canonical = canonical_id_prefix(prefix)
            if canonical is None:
                raise InvalidArgument(
                    "id_prefix",
                    f"{quote(prefix[:64])} is not the start of a job ID: give 1 to 32 hex digits "
                    "(0-9, a-f), hyphens allowed, e.g. 0193a7c2",
                    reason="ID_PREFIX_INVALID",
                )
            prefix = canonical
        for field, value in (("idempotency_key", search.idempotency_key), ("unique_key", search.unique_key)):
            _check_text(field, value, MAX_KEY_CHARS)
        _check_text("text", search.text, MAX_TEXT_CHARS)
        _check_range("created", search.created_after_ms, search.created_before_ms)
        _check_range("finished", search.finished_after_ms, search.finished_before_ms)
        return dataclasses.replace(search, id_prefix=prefix)

    def bulk_count(self, job_filter: JobFilter, allowed: tuple[JobState, ...], verb: str) -> tuple[int, bool]:
        """How many jobs ``bulk_cancel`` or ``bulk_retry`` (``verb``) of ``job_filter``
        would act on now, and whether the count stopped at ``bulk_count_cap``; the same
        refusals as the operation itself, before any read."""
        states = check_filter(job_filter, allowed, verb, self.store.bounds.max_wire_name_length)
        return self.store.count_for_bulk(
            queue=job_filter.queue,
            states=states,
            wire_name=job_filter.wire_name,
            cap=self.limits.bulk_count_cap,
        )


def _check_text(field: str, value: str | None, limit: int) -> None:
    if value is None:
        return
    if not value:
        raise InvalidArgument(field, "must not be empty", reason="FIELD_EMPTY")
    if len(value) > limit:
        raise InvalidArgument(
            field,
            f"is {len(value)} characters, the limit is {limit}",
            reason="FIELD_TOO_LONG",
            metadata={"length": len(value), "limit": limit},
        )
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL characters", reason="FIELD_INVALID")


def _check_range(name: str, after_ms: int | None, before_ms: int | None) -> None:
    for bound, value in (("after", after_ms), ("before", before_ms)):
        if value is not None and not 0 <= value < 2**47:
            raise InvalidArgument(f"{name}_{bound}", f"{value} ms is not a time this search takes")
    if after_ms is not None and before_ms is not None and after_ms >= before_ms:
        raise InvalidArgument(
            f"{name}_before",
            f"the {name} range is empty: 'after' must be earlier than 'before'",
            reason="RANGE_EMPTY",
        )


def _cursor(cursor: str, by_id: bool, window: int) -> tuple[str | None, int]:
    """(the job to continue after, the matches to skip) from a page's cursor."""
    if not cursor:
        return None, 0
    if by_id:
        canonical = parse_id(cursor)
        if canonical is not None:
            return canonical, 0
    elif cursor.isdigit() and len(cursor) <= 9 and int(cursor) <= window:
        return None, int(cursor)
    raise InvalidArgument(
        "cursor",
        f"{quote(cursor[:64])} is not a page token of this search; start again from its first page",
        reason="PAGE_TOKEN_INVALID",
    )
