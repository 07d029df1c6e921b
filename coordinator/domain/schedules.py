"""Recurring schedules (R-18): the schedule values, how a matching local wall time
becomes a tick (daylight saving time), and which ticks one pass runs and which it skips.

Pure: the cron expression is evaluated in ``service.cron`` (with the ``cronsim``
library), which hands this module naive wall times and a ``tzinfo``; the current time
is an argument.

**Ticks** are the local wall-clock times the expression matches, as instants in whole
seconds. Daylight saving time: a local time that does not exist (the hour skipped in
spring) is skipped, not moved; a local time that happens twice (the hour repeated in
autumn) runs once, at its first occurrence. So ``30 2 * * *`` in ``Europe/Berlin`` has
no tick on 2026-03-29 and one on 2026-10-25 (at 00:30 UTC, 02:30 summer time).

**A pass** (``plan_ticks``) at ``now`` looks at the ticks from the schedule's next tick
through ``now``. Those at most ``grace_ms`` old are on time and all run. Older ones were
missed (no coordinator ran then): with ``CatchUp.SKIP`` they are recorded as skipped and
not run; with ``CatchUp.RUN_ONCE`` the newest of them runs, one job for the whole gap,
and the others are recorded as skipped. At most ``keep_skipped`` of the newest skipped
ticks are reported (``StoreBounds.max_skipped_ticks``): a long gap is never enumerated
whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Protocol

from coordinator.domain.records import DEFAULT_QUEUE

MAX_TIMEZONE_LENGTH = 64
"""The ``schedules.timezone`` column's size (the longest IANA name has 32)."""
NEXT_RUNS = 3
"""How many upcoming ticks a listed schedule shows."""
MAX_LISTED_SKIPPED_TICKS = 100
"""Most skipped ticks a listed schedule shows (newest first), whatever the bound keeps."""
_MAX_NONEXISTENT_IN_A_ROW = 100_000
"""Ticks that fall in a DST gap are skipped; past this many in a row (an expression that
only ever matches nonexistent times) the schedule is taken to have no next tick."""


class CatchUp(StrEnum):
    """What happens to ticks missed while no coordinator ran."""

    SKIP = "skip"
    """Recorded as skipped, not run (the default)."""
    RUN_ONCE = "run_once"
    """One job for the whole gap (the newest missed tick); the others are recorded as
    skipped."""


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule as the store holds it. Times are milliseconds since the epoch."""

    name: str
    cron: str
    """Normalized: single spaces, a macro kept as written (``@daily``)."""
    timezone: str
    """An IANA time zone name, e.g. ``Europe/Berlin``."""
    wire_name: str
    payload: bytes
    queue: str
    catch_up: CatchUp
    paused: bool
    created_at_ms: int
    updated_at_ms: int
    next_tick_ms: int | None
    """The tick the next pass looks at first; None while paused or when the expression
    has no future tick."""
    last_tick_ms: int | None
    """The newest tick enqueued, None before the first."""
    last_job_id: str | None
    """The job of ``last_tick_ms``."""


@dataclass(frozen=True, slots=True)
class NewScheduleSpec:
    """A create request, already decoded from the wire."""

    name: str
    cron: str
    timezone: str
    wire_name: str
    payload: bytes = b"{}"
    queue: str = DEFAULT_QUEUE
    catch_up: CatchUp = CatchUp.SKIP


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A schedule as it is listed: its record, its next runs and its newest skipped ticks."""

    record: ScheduleRecord
    next_runs_ms: tuple[int, ...]
    """The next ``NEXT_RUNS`` ticks; empty while paused."""
    skipped_ticks_ms: tuple[int, ...]
    """The newest skipped ticks kept, newest first."""


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one pass does with a schedule's ticks."""

    run: tuple[int, ...]
    """Ticks to enqueue, oldest first."""
    skipped: tuple[int, ...]
    """Missed ticks to record as skipped, oldest first (the newest ``keep_skipped`` only)."""
    next_tick_ms: int | None
    """Where the schedule resumes: the first tick not handled by this pass."""


class Ticks(Protocol):
    """A schedule's ticks: instants in milliseconds, whole seconds (``service.cron.Cron``)."""

    def after(self, after_ms: int) -> Iterator[int]:
        """Ticks strictly after ``after_ms``, increasing."""
        ...

    def before(self, before_ms: int) -> Iterator[int]:
        """Ticks strictly before ``before_ms``, decreasing."""
        ...

    def next_after(self, after_ms: int) -> int | None:
        """The first tick strictly after ``after_ms``, None when there is none."""
        ...


def start_wall(seconds: int, zone: tzinfo, *, forward: bool) -> datetime:
    """The naive local wall time a cron iteration over ticks after (``forward``) or
    before the instant ``seconds`` starts from.

    In the repeated hour's second pass (fold 1) the earlier wall times of that hour are
    ticks of its first pass: a forward iteration starts at the wall time and drops what
    came first (``instants`` then the caller's filter), a backward one starts after the
    hour so that none is missed.
    """
    local = datetime.fromtimestamp(seconds, UTC).astimezone(zone)
    wall = local.replace(tzinfo=None)
    if not forward and local.fold == 1:
        first_offset = local.replace(fold=0).utcoffset() or timedelta()
        wall += max(first_offset - (local.utcoffset() or timedelta()), timedelta())
    return wall


def instants(walls: Iterator[datetime], zone: tzinfo) -> Iterator[int]:
    """The instants (ms) of naive wall times in ``zone``: one that does not exist is
    skipped, one that happens twice is taken at its first occurrence (fold 0)."""
    nonexistent = 0
    for wall in walls:
        moment = wall.replace(tzinfo=zone, fold=0)
        if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
            nonexistent += 1
            if nonexistent > _MAX_NONEXISTENT_IN_A_ROW:
                return
            continue
        nonexistent = 0
        yield int(moment.timestamp()) * 1000


def plan_ticks(
    cron: Ticks,
    *,
    next_tick_ms: int,
    now_ms: int,
    grace_ms: int,
    catch_up: CatchUp,
    keep_skipped: int,
    max_run: int,
) -> TickPlan:
    """Which ticks from ``next_tick_ms`` through ``now_ms`` run and which are skipped
    (see the module's docstring). At most ``max_run`` on-time ticks run per pass; when
    there are more, the plan stops after them and the next pass goes on from there."""
    if next_tick_ms > now_ms:
        return TickPlan((), (), next_tick_ms)
    on_time_from = max(next_tick_ms, now_ms - grace_ms)
    run: list[int] = []
    more_on_time = False
    for tick in cron.after(on_time_from - 1):
        if tick > now_ms:
            break
        if len(run) == max_run:
            more_on_time = True
            break
        run.append(tick)
    missed: list[int] = []  # newest first
    if next_tick_ms < on_time_from:
        wanted = keep_skipped + (1 if catch_up is CatchUp.RUN_ONCE else 0)
        for tick in cron.before(on_time_from):
            if tick < next_tick_ms or len(missed) == wanted:
                break
            missed.append(tick)
    resume_after = run[-1] if more_on_time else now_ms
    if catch_up is CatchUp.RUN_ONCE and missed:
        run.insert(0, missed.pop(0))
    skipped = tuple(reversed(missed[:keep_skipped]))
    return TickPlan(tuple(run), skipped, cron.next_after(resume_after))


TICK_KEY_PREFIX = "schedule:"
"""Idempotency keys starting so belong to schedules' ticks: only the scheduler writes
them, and a client's enqueue with one is refused. Were they open, an enqueue token could
take a future tick's key first, and the schedule would then record that job as its run."""


def idempotency_key(name: str, tick_ms: int) -> str:
    """The key of a tick's job, ``schedule:<name>:<tick in UTC, ISO 8601>``: the jobs
    table's unique key makes each tick one job, whichever replica enqueues it."""
    return f"{TICK_KEY_PREFIX}{name}:{iso_tick(tick_ms)}"


def iso_tick(tick_ms: int) -> str:
    """``2026-03-30T00:30:00Z``."""
    return datetime.fromtimestamp(tick_ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
