"""A write transaction's claim reads (R-17): the claimable jobs of a queue, in claim order,
locked and skipped by other replicas (``FOR UPDATE SKIP LOCKED`` on PostgreSQL).

New jobs of the transaction whose insert is still held (PostgreSQL, ``store.pg_held``) are
merged in: the reads run without sending them, so an enqueue's claims go out to the
workers before its jobs are written, and its jobs are inserted already claimed
(``pg_held.HeldWrites.fold``) while they travel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, bindparam, literal_column, select, text

from coordinator.domain.records import JobRecord, QueueRecord
from coordinator.domain.states import CLAIMABLE_STATES
from coordinator.store.prepared import DriverRows, Prepared
from coordinator.store.rows import job_from_mapping, jobs_from
from coordinator.store.schema import CLAIMABLE_PREDICATE, JOB_COLUMNS, jobs
from coordinator.store.tx_base import Lockable, TxBase

_CLAIMABLE_IN_QUEUE = Lockable(
    select(jobs)
    .where(
        jobs.c.queue == bindparam("queue"),
        text(CLAIMABLE_PREDICATE),  # as text, or the partial index is not used
        # "+ 0": SQLite would take ix_jobs_due for the run-at range and then sort every
        # claimable job of the queue; ix_jobs_claim gives the order, so LIMIT ends the
        # walk. An expression keeps the range off any index.
        jobs.c.run_at_ms + literal_column("0") <= bindparam("now_ms"),
        jobs.c.wire_name.in_(bindparam("wire_names", expanding=True)),
    )
    .order_by(jobs.c.priority.desc(), jobs.c.run_at_ms, jobs.c.id)
    .limit(bindparam("limit", type_=Integer)),
    skip_locked=True,
)

# PostgreSQL: the queue's controls and, when they let claims take from it, its claimable
# jobs, in one statement. One row at least: the queue's (NULLs when it has none), with
# NULL job columns when no job is claimed. The jobs are read as ``_CLAIMABLE_IN_QUEUE``
# reads them (the same index walk, behind a filter on the queue's row evaluated once).
_CONTROLS_AND_CLAIMABLE = Prepared(
    text(
        "SELECT q.name, q.paused, q.concurrency_limit, "
        + ", ".join(f"c.{column}" for column in JOB_COLUMNS)
        + " FROM (SELECT 1) AS one "
        "LEFT JOIN queues AS q ON q.name = :queue "
        "LEFT JOIN LATERAL ("
        "SELECT jobs.* FROM jobs "
        f"WHERE jobs.queue = :queue AND {CLAIMABLE_PREDICATE} AND jobs.run_at_ms + 0 <= :now_ms "
        "AND jobs.wire_name = ANY(:wire_names) "
        "AND (q.name IS NULL OR (NOT q.paused AND q.concurrency_limit IS NULL)) "
        "ORDER BY jobs.priority DESC, jobs.run_at_ms, jobs.id LIMIT :limit "
        "FOR UPDATE OF jobs SKIP LOCKED"
        ") AS c ON true "
        "ORDER BY c.priority DESC, c.run_at_ms, c.id"
    )
    .bindparams(bindparam("limit", type_=Integer), bindparam("now_ms", type_=BigInteger))
    .columns(*(literal_column(name) for name in ("q_name", "q_paused", "q_limit", *JOB_COLUMNS)))
)
_CLAIMABLE_STATES = frozenset(state.value for state in CLAIMABLE_STATES)
"""As a held job row names its state."""
_JOB_ID_AT = 3 + JOB_COLUMNS.index("id")
"""Where a row of ``_CONTROLS_AND_CLAIMABLE`` has its job's ID (None: no job)."""


class ClaimOps(TxBase):
    def claimable(
        self, queues: Sequence[str], wire_names: Sequence[str], now_ms: int, limit: int
    ) -> list[JobRecord]:
        """Claimable jobs in claim order: priority desc, run-at, id (R-17).

        One query per queue, each an ordered walk of that queue's part of ``ix_jobs_claim``
        that stops after ``limit`` rows, merged here: a single query over several queues
        would have to sort every claimable job of all of them, and a deep backlog makes
        that the cost of every claim. On PostgreSQL a multi-queue claim may lock up to
        ``limit`` rows per queue for the rest of the transaction; others skip them.
        The caller claims every job returned (see the module's doc for held new jobs).
        """
        found: list[JobRecord] = []
        names = list(wire_names)
        for queue in sorted(set(queues)):
            params = {"queue": queue, "now_ms": now_ms, "wire_names": names, "limit": limit}
            found.extend(jobs_from(self._read_locked(_CLAIMABLE_IN_QUEUE, params, past_held_inserts=True)))
        return self._taken(found, queues, names, now_ms, limit, merged=len(queues) > 1)

    @property
    def reads_controls_with_claims(self) -> bool:
        """Whether ``controls_and_claimable`` may be used (PostgreSQL)."""
        return self._postgres

    def controls_and_claimable(
        self, queue: str, wire_names: Sequence[str], now_ms: int, limit: int
    ) -> tuple[QueueRecord | None, list[JobRecord]]:
        """``queue``'s controls (None: it has no row, so none; a record of its controls
        only, without its timestamps) and, when they let claims
        take from it (not paused, no concurrency limit), what ``claimable`` would return
        for it; nothing when they do not. One statement (PostgreSQL only): a claim at a
        light load waits for one read instead of two before its jobs go out."""
        assert self._postgres, "one statement with a LATERAL join: PostgreSQL only"
        names = list(wire_names)
        params = {"queue": queue, "now_ms": now_ms, "wire_names": names, "limit": limit}
        rows = _CONTROLS_AND_CLAIMABLE.execute(self._reader, params)
        first = rows.rows[0]
        record = None if first[0] is None else QueueRecord(first[0], bool(first[1]), first[2])
        if record is not None and not record.free:
            return record, []
        claimed_rows = DriverRows(rows.keys(), [row for row in rows.rows if row[_JOB_ID_AT] is not None])
        found = list(jobs_from(claimed_rows))
        return record, self._taken(found, (queue,), names, now_ms, limit, merged=False)

    def _taken(
        self,
        found: list[JobRecord],
        queues: Sequence[str],
        names: Sequence[str],
        now_ms: int,
        limit: int,
        *,
        merged: bool,
    ) -> list[JobRecord]:
        """``found`` (each queue's read, in claim order unless ``merged``) with the
        transaction's unsent claimable jobs, the first ``limit`` in claim order; they
        are the caller's now: no later claim of this transaction takes them again."""
        # After the reads: one that sent the held writes sent the new jobs too.
        unsent = self._unsent_claimable(queues, names, now_ms, limit)
        if merged or unsent:
            found += unsent
            found.sort(key=_claim_order)
        found = found[:limit]
        for job in found:
            # The caller claims every job returned: none of them is left for other replicas.
            self._to_announce.discard(job.id)
        return found

    def _unsent_claimable(
        self, queues: Sequence[str], wire_names: Sequence[str], now_ms: int, limit: int
    ) -> list[JobRecord]:
        """The first ``limit`` claimable new jobs, in claim order, whose insert is still
        held (PostgreSQL), as they stand: the claim reads let held inserts wait, so they
        cannot see them. A claim's writes are folded into its job's held row before the
        next read (``_BatchRun._claim_found`` flushes them, ``HeldWrites.fold``), so a
        job claimed here is claimable no more."""
        if not self._held:
            return []
        rows = [row for row in self._held.inserted(jobs) if _claimable(row, queues, wire_names, now_ms)]
        rows.sort(key=_row_claim_order)
        return [job_from_mapping(row) for row in rows[:limit]]


def _claimable(row: Mapping[str, Any], queues: Sequence[str], wire_names: Sequence[str], now_ms: int) -> bool:
    """``CLAIMABLE_PREDICATE`` and the claim read's conditions, for a held job row."""
    return (
        row["state"] in _CLAIMABLE_STATES
        and row["run_at_ms"] <= now_ms
        and row["queue"] in queues
        and row["wire_name"] in wire_names
    )


def _row_claim_order(row: Mapping[str, Any]) -> tuple[int, int, str]:
    return (-row["priority"], row["run_at_ms"], row["id"])


def _claim_order(job: JobRecord) -> tuple[int, int, str]:
    return (-job.priority, job.run_at_ms, job.id)
