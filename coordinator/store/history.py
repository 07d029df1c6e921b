"""A job's history (``transitions``) without a row for each start (issue 39).

A start's transition is always the same: reserved to running, for the attempt just
claimed, one sequence number after that claim's transition (nothing else can change a
reserved job and leave its attempt current), at the time the attempt's ``started_at_ms``
records. So the writer keeps no row for it, and the reader puts it back: after a claim's
row whose attempt started and whose next sequence number has no row of its own.

Rows written before this (a start's own row after its claim) are read as they are, so a
database's existing history reads unchanged without a migration.

History is cut to the newest ``max_history_per_job`` entries. A cut that removes a claim
but not the start after it (the cut falls exactly on the claim) writes that start's row
instead, so the entries kept are the ones a row per start would have kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select

from coordinator.domain.changes import CLAIMED, STARTED
from coordinator.domain.records import Transition
from coordinator.domain.states import JobState
from coordinator.store.rows import transition_from_row
from coordinator.store.schema import attempts, transitions
from coordinator.store.tx_base import TxBase

_HISTORY = (
    select(transitions, attempts.c.started_at_ms)
    .outerjoin(attempts, and_(attempts.c.id == transitions.c.attempt_id, transitions.c.reason == CLAIMED))
    .where(transitions.c.job_id == bindparam("job_id"))
    .order_by(transitions.c.seq)
)
"""A job's rows, each claim's with the start its attempt recorded (one statement, so one
snapshot of both tables)."""
_CLAIM_CUT = (
    select(transitions.c.job_id, transitions.c.attempt_id, attempts.c.started_at_ms)
    .join(attempts, attempts.c.id == transitions.c.attempt_id)
    .where(
        transitions.c.job_id == bindparam("job_id"),
        transitions.c.seq == bindparam("cut"),
        transitions.c.reason == CLAIMED,
        attempts.c.started_at_ms.is_not(None),
    )
)
"""The claim a cut removes last, if its attempt started: its start is kept."""
_CUT = transitions.delete().where(
    transitions.c.job_id == bindparam("job_id"), transitions.c.seq <= bindparam("cut")
)


def read_history(conn: Connection, job_id: str) -> list[Transition]:
    """A job's history in sequence order: its rows, with each start put back."""
    rows = conn.execute(_HISTORY, {"job_id": job_id}).all()
    stored = {row.seq for row in rows}
    history: list[Transition] = []
    for row in rows:
        history.append(transition_from_row(row))
        if row.started_at_ms is not None and row.seq + 1 not in stored:
            history.append(start_entry(job_id, row.seq + 1, row.attempt_id, row.started_at_ms))
    return history


def start_entry(job_id: str, seq: int, attempt_id: str, at_ms: int) -> Transition:
    return Transition(job_id, seq, at_ms, JobState.RESERVED, JobState.RUNNING, attempt_id, STARTED)


def is_start(row: Mapping[str, Any]) -> bool:
    return bool(row["reason"] == STARTED)


class HistoryOps(TxBase):
    def write_history(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Inserts a write's transition rows (sequence order per job) but its starts, and
        cuts each job's history to the newest ``max_history_per_job`` entries."""
        keep = self.bounds.max_history_per_job
        cuts = {row["job_id"]: row["seq"] - keep for row in history if row["seq"] > keep}
        # A start is kept as a row only when its claim is cut now and it is not.
        self._insert_rows(
            transitions,
            [row for row in history if not is_start(row) or cuts.get(row["job_id"]) == row["seq"] - 1],
        )
        if cuts:
            self._cut(cuts)

    def _cut(self, cuts: Mapping[str, int]) -> None:
        params = [{"job_id": job_id, "cut": cut} for job_id, cut in sorted(cuts.items())]
        kept = [
            {
                "job_id": row.job_id,
                "seq": cut + 1,
                "at_ms": row.started_at_ms,
                "from_state": JobState.RESERVED.value,
                "to_state": JobState.RUNNING.value,
                "attempt_id": row.attempt_id,
                "reason": STARTED,
            }
            for cut, row in _claims_cut_last(self._conn, params)
        ]
        self._conn.execute(_CUT, params)
        self._insert_rows(transitions, kept)


def _claims_cut_last(conn: Connection, params: Iterable[Mapping[str, Any]]) -> Iterable[tuple[int, Any]]:
    """Each cut's last claim whose attempt started and whose start has no row yet (a start
    of this very write, kept above, has one)."""
    for param in params:
        row = conn.execute(_CLAIM_CUT, param).first()
        if row is None:
            continue
        taken = conn.execute(
            select(transitions.c.seq).where(
                transitions.c.job_id == param["job_id"], transitions.c.seq == param["cut"] + 1
            )
        ).first()
        if taken is None:
            yield param["cut"], row
