"""A search of the jobs (the dashboard's jobs list): what it asks for, and the rules that
keep it bounded. Pure values; the store runs it (``store.search``).

What an index answers is searched over every job: queue, state, wire name, a job ID
prefix (a range of the primary key), the created time (a range of the primary key too:
job IDs are UUIDv7 made at enqueue, so their first 48 bits are the creation time) and an
exact idempotency key (the per-queue key index, probed queue by queue).

What no index answers (a unique key, payload text, a finished-time range, and sorting by
run time or finish time) is applied within a *window*: at most ``scan_limit`` jobs, the
newest that match the indexed part, read per page. A search sorted by creation time
continues from one window to the next (its next page reads the next window), so nothing
is out of reach; a search sorted otherwise sorts one window, and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from coordinator.domain.records import JobRecord
from coordinator.domain.states import JobState

MAX_TEXT_CHARS = 200
"""Longest payload text searched for."""
MAX_KEY_CHARS = 256
"""Longest idempotency or unique key (the columns' size)."""
_HEX_PREFIX = re.compile(r"[0-9a-f]{1,32}")
_HYPHENS_AT = (8, 12, 16, 20)
"""Where the canonical 8-4-4-4-12 form puts its hyphens (in hex digits before them)."""


class SortKey(StrEnum):
    CREATED = "created"
    RUN_AT = "run_at"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class JobSearch:
    """Every field given must match; None means any."""

    queue: str | None = None
    state: JobState | None = None
    wire_name: str | None = None
    id_prefix: str | None = None
    """The start of a job ID in canonical form (``canonical_id_prefix``)."""
    idempotency_key: str | None = None
    unique_key: str | None = None
    text: str | None = None
    """Bytes (UTF-8) the start of the payload contains, case-sensitive."""
    created_after_ms: int | None = None
    """Inclusive."""
    created_before_ms: int | None = None
    """Exclusive."""
    finished_after_ms: int | None = None
    finished_before_ms: int | None = None
    sort: SortKey = SortKey.CREATED
    descending: bool = True

    @property
    def needs_window(self) -> bool:
        """True when a filter or the order is one no index answers (see the module)."""
        return (
            self.unique_key is not None
            or self.text is not None
            or self.finished_after_ms is not None
            or self.finished_before_ms is not None
            or self.sort is not SortKey.CREATED
        )

    @property
    def only_bulk_fields(self) -> bool:
        """True when the search is the queue, state and wire name filter that bulk
        operations take (and at least one of them): its matches are what they act on."""
        plain = JobSearch(self.queue, self.state, self.wire_name, sort=self.sort, descending=self.descending)
        return self == plain and (self.queue, self.state, self.wire_name) != (None, None, None)


@dataclass(frozen=True, slots=True)
class SearchPage:
    """One page of a search's matches."""

    jobs: list[JobRecord]
    next_cursor: str
    """Where the next page starts ('' at the end)."""
    window: int | None
    """The window read (``scan_limit``), or None when the search needed none."""
    window_full: bool
    """The window held ``window`` jobs: older ones were not looked at by this page."""


def canonical_id_prefix(text: str) -> str | None:
    """The canonical start of a job ID that ``text`` (hex digits, hyphens anywhere, any
    case) begins, or None when it is not one: ``0193A7C21`` gives ``0193a7c2-1``."""
    digits = text.strip().lower().replace("-", "")
    if not _HEX_PREFIX.fullmatch(digits):
        return None
    parts, start = [], 0
    for end in (*_HYPHENS_AT, 32):
        if start >= len(digits):
            break
        parts.append(digits[start:end])
        start = end
    return "-".join(parts)


def id_floor(ms: int) -> str:
    """The smallest UUIDv7 text form of the millisecond ``ms``: every job created at or
    after ``ms`` (with an ID the coordinator made) has an ID at least this."""
    digits = f"{max(ms, 0):012x}"[-12:]
    return f"{digits[:8]}-{digits[8:]}-0000-0000-000000000000"


PREFIX_END = "~"
"""Sorts after every character of an ID ('~' is above hex digits and '-' byte for byte):
the IDs starting with ``p`` are those at least ``p`` and below ``p + PREFIX_END``."""
