"""The read half of ``Store``: every read method answers from a connection of the read
engine, through the query functions of ``reads``, ``schedules``, ``search``, ``graph``,
``waiting``, ``claim_rates`` and ``dashboard_sessions``. ``Store`` (``store.store``)
adds the engines' lifecycle and the write transactions.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from coordinator.domain.backlog import HeldBack, KeyedBacklog, hold_back
from coordinator.domain.clock import ClockSample
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.graph import Neighbourhood
from coordinator.domain.records import (
    AttemptRecord,
    AuditEvent,
    FinishedMinute,
    JobRecord,
    LeaseHolder,
    QueueRecord,
    QueueStats,
    Relatives,
    TokenRecord,
    Transition,
)
from coordinator.domain.schedules import ScheduleRecord
from coordinator.domain.search import JobSearch
from coordinator.domain.states import LEASED_STATES, JobState
from coordinator.store import backlog, dashboard_sessions, planner, reads, waiting
from coordinator.store import graph as job_graph
from coordinator.store import schedules as schedule_reads
from coordinator.store import search as job_search
from coordinator.store.driver_errors import store_error

log = logging.getLogger(__name__)


_DATABASE_NOW_MS = text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")


class StoreReads:
    """The read methods of ``Store``, over the read engine ``Store`` opens."""

    postgres: bool
    _read_engine: Engine
    _analyzed_at: dict[str, int]
    """The rows each table had when this store last refreshed its planner statistics."""

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        try:
            with self._read_engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            raise store_error(exc, "a read", before_commit=False) from exc

    def database_clock_samples(self, count: int) -> list[ClockSample]:
        """``count`` readings of the database server's clock (PostgreSQL; none on
        SQLite), each bracketed by the host's clock, on one connection so that only the
        first pays for getting it (``domain.clock.offset_from_samples``)."""
        if not self.postgres:
            return []
        samples: list[ClockSample] = []
        with self._reading() as conn:
            for _ in range(count):
                sent_ms = time.time_ns() // 1_000_000
                remote = conn.execute(_DATABASE_NOW_MS).scalar()
                received_ms = time.time_ns() // 1_000_000
                if remote is not None:
                    samples.append(ClockSample(sent_ms, int(remote), received_ms))
        return samples

    def database_time_ms(self) -> int | None:
        """The database server's clock (PostgreSQL), to anchor every replica (R-13)."""
        if not self.postgres:
            return None
        with self._reading() as conn:
            value = conn.execute(_DATABASE_NOW_MS).scalar()
        return int(value) if value is not None else None

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._reading() as conn:
            return reads.get_job(conn, job_id)

    def held_back(self, queue: QueueRecord, due: int, queue_active: int, now_ms: int, scan: int) -> HeldBack:
        """What ``queue``'s controls make of its ``due`` jobs now (``store.backlog``)."""
        with self._reading() as conn:
            return backlog.held_back(conn, queue, due, queue_active, now_ms, scan=scan)

    def held_back_of(self, stats: QueueStats, now_ms: int, scan: int) -> HeldBack:
        """What a listed queue's controls make of its available jobs now: with nothing to
        weigh (no control, none available, or paused: all held), worked out without a read."""
        available = stats.counts.get(JobState.AVAILABLE, 0)
        leased = sum(stats.counts.get(state, 0) for state in LEASED_STATES)
        if stats.queue.free or not available or stats.queue.paused:
            return hold_back(stats.queue, KeyedBacklog.unkeyed(available), leased, None)
        return self.held_back(stats.queue, available, leased, now_ms, scan)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        with self._reading() as conn:
            return reads.get_jobs(conn, job_ids)

    def list_jobs(
        self,
        *,
        queue: str | None,
        state: JobState | None,
        wire_name: str | None,
        after_id: str | None,
        limit: int,
    ) -> list[JobRecord]:
        """Newest first (IDs are time-ordered), keyset-paged after ``after_id``; payload
        and output are left out of list views."""
        with self._reading() as conn:
            return reads.list_jobs(
                conn, queue=queue, state=state, wire_name=wire_name, after_id=after_id, limit=limit
            )

    def in_flight_by_worker(self, worker_ids: Sequence[str]) -> dict[str, int]:
        """Jobs reserved or running per worker ID (workers holding none are left out)."""
        with self._reading() as conn:
            return reads.in_flight_by_worker(conn, worker_ids)

    def relatives(self, job_id: str) -> Relatives:
        """The job's parents and children (R-15)."""
        with self._reading() as conn:
            return reads.relatives(conn, job_id)

    def waiting_facts(self, job: JobRecord, now_ms: int) -> waiting.WaitingFacts:
        """``job``'s queue and its counts for ``domain.flow.waiting_reason`` (``store.waiting``)."""
        with self._reading() as conn:
            return waiting.waiting_facts(conn, job, now_ms)

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        with self._reading() as conn:
            return reads.get_attempt(conn, attempt_id)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        with self._reading() as conn:
            return reads.list_attempts(conn, job_id)

    def list_transitions(self, job_id: str) -> list[Transition]:
        with self._reading() as conn:
            return reads.list_transitions(conn, job_id)

    def refresh_planner_statistics(self) -> list[str]:
        """PostgreSQL: ANALYZE the job tables that outgrew the planner's estimate
        (``store.planner``); returns those it analyzed. A store analyzes a table again
        only once it doubled since its own last run, so a role that may not analyze (the
        server skips the table with a warning) does not ask at every call."""
        if not self.postgres:
            return []
        with self._reading() as conn:
            known = planner.known_rows(conn)
            estimated = planner.estimated_rows(conn, sorted(known))
        stale = sorted(
            table
            for table, rows in known.items()
            if planner.outgrown(rows, max(estimated[table], self._analyzed_at.get(table, 0)))
        )
        if not stale:
            return []
        try:
            with self._read_engine.connect() as conn:
                planner.analyze(conn.execution_options(isolation_level="AUTOCOMMIT"), stale)
        except DBAPIError as exc:
            raise store_error(exc, "refreshing the planner statistics", before_commit=False) from exc
        for table in stale:
            self._analyzed_at[table] = known[table]
        log.info(
            "refreshed the planner statistics of %s (%s rows known, %s estimated)",
            ", ".join(stale),
            ", ".join(str(known[t]) for t in stale),
            ", ".join(str(estimated[t]) for t in stale),
        )
        return stale

    def queue_stats(
        self, now_ms: int, *, after_name: str | None = None, limit: int | None = None, name: str | None = None
    ) -> list[QueueStats]:
        """Known queues by name (at most ``limit`` after ``after_name``; every one when
        unset, which ``max_queues`` bounds; only ``name``, if given), each with its
        controls, its jobs per state and its oldest due job (R-17), without a scan of the
        jobs."""
        with self._reading() as conn:
            return reads.queue_stats(conn, now_ms, after_name=after_name, limit=limit, name=name)

    def job_totals(self) -> tuple[int, dict[JobState, int]]:
        """How many queues are known, and the jobs of all of them per state."""
        with self._reading() as conn:
            return reads.job_totals(conn)

    def slot_demand(
        self, target: DemandTarget, now_ms: int, cap: int, scan: int = 0, *, leased_enough: bool = False
    ) -> SlotDemand:
        """``target``'s leased and runnable due jobs, each counted up to ``cap``; at most
        ``scan`` due jobs (or ``cap``, if more) walked for per-key controls (``reads``)."""
        with self._reading() as conn:
            return reads.slot_demand(conn, target, now_ms, cap, scan, leased_enough=leased_enough)

    def finished_since(self, since_ms: int) -> list[FinishedMinute]:
        """Jobs that ended per minute, queue and terminal state, from the minute holding
        ``since_ms`` on (kept for a day; folded from the count deltas, not counted)."""
        with self._reading() as conn:
            return reads.finished_since(conn, since_ms)

    def lease_holders(self, limit: int) -> list[LeaseHolder]:
        """The workers holding reserved or running jobs now (any replica), most first."""
        with self._reading() as conn:
            return reads.lease_holders(conn, limit)

    def count_by_state(self) -> dict[str, int]:
        with self._reading() as conn:
            return reads.count_by_state(conn)

    def get_token(self, token_id: str) -> TokenRecord | None:
        with self._reading() as conn:
            return reads.get_token(conn, token_id)

    def revoked_tokens(self, token_ids: Sequence[str]) -> set[str]:
        """Those of ``token_ids`` that are revoked or do not exist (any more)."""
        with self._reading() as conn:
            return reads.revoked_tokens(conn, token_ids)

    def dashboard_session_token(self, id_sha256: str, now_ms: int) -> TokenRecord | None:
        """The unrevoked token of an unexpired dashboard session, else None."""
        with self._reading() as conn:
            return dashboard_sessions.session_token(conn, id_sha256, now_ms)

    def list_tokens(self, *, include_revoked: bool) -> list[TokenRecord]:
        with self._reading() as conn:
            return reads.list_tokens(conn, include_revoked=include_revoked)

    def list_audit_events(
        self, *, action: str | None, target: str | None, before_id: int | None, limit: int
    ) -> list[AuditEvent]:
        """Newest first, keyset-paged before ``before_id``."""
        with self._reading() as conn:
            return reads.list_audit_events(
                conn, action=action, target=target, before_id=before_id, limit=limit
            )

    # -- schedules (R-18) --------------------------------------------------------------

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        with self._reading() as conn:
            return schedule_reads.get_schedule(conn, name)

    def list_schedules(self, *, after_name: str | None, limit: int) -> list[ScheduleRecord]:
        """By name, keyset-paged after ``after_name``."""
        with self._reading() as conn:
            return schedule_reads.list_schedules(conn, after_name=after_name, limit=limit)

    def newest_skipped_ticks(self, names: Sequence[str], per_schedule: int) -> dict[str, list[int]]:
        """Per schedule, its newest ``per_schedule`` skipped ticks, newest first."""
        with self._reading() as conn:
            return schedule_reads.newest_skipped_ticks(conn, names, per_schedule)

    def due_schedule_names(self, now_ms: int, limit: int) -> list[str]:
        """Unpaused schedules whose next tick has come, the most overdue first."""
        with self._reading() as conn:
            return schedule_reads.due_schedule_names(conn, now_ms, limit)

    def search_jobs(self, search: JobSearch, **bounds: Any) -> job_search.SearchRows:
        """A page of a jobs search, bounded as ``store.search`` says."""
        with self._reading() as conn:
            return job_search.search_jobs(conn, search, **bounds)

    def neighbourhood(self, job_id: str, limit: int) -> Neighbourhood:
        """The job's parents and children with their states, ``limit`` each way."""
        with self._reading() as conn:
            return job_graph.neighbourhood(conn, job_id, limit)

    def count_for_bulk(self, **job_filter: Any) -> tuple[int, bool]:
        """How many jobs a bulk operation would select now (``store.search``)."""
        with self._reading() as conn:
            return job_search.count_for_bulk(conn, **job_filter)
