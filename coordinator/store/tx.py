"""One write transaction's named operations (``Store.transact``/``Store.write`` hand it
out). Every job update is conditional on the state and history sequence the caller read
(R-11); rows are locked on PostgreSQL (``FOR UPDATE [SKIP LOCKED]``), SQLite has a single
writer. Operations take and return domain values; SQL stays here.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.exc import IntegrityError

from coordinator.domain.changes import JobChange
from coordinator.domain.records import (
    AttemptEnd,
    AttemptRecord,
    JobRecord,
    NewAttempt,
    WorkerIdentity,
)
from coordinator.domain.states import LEASED_STATES, JobState
from coordinator.store.claims import ClaimOps
from coordinator.store.driver_errors import unique_violation
from coordinator.store.errors import DuplicateKey
from coordinator.store.history import HistoryOps
from coordinator.store.prepared import DriverRows, Prepared
from coordinator.store.purge import purge_jobs, remove_jobs
from coordinator.store.row_writes import RowUpdate
from coordinator.store.rows import (
    FINISH_COLUMNS,
    attempt_end_params,
    attempts_from,
    changed_values,
    job_row,
    jobs_from,
    new_attempt_row,
)
from coordinator.store.schedules import ScheduleWrites
from coordinator.store.schema import (
    JOB_COLUMNS,
    LEASED_PREDICATE,
    SCHEDULED_PREDICATE,
    UNIQUE_UNFINISHED_PREDICATE,
    attempts,
    jobs,
    transitions,
)
from coordinator.store.tx_access import AccessOps
from coordinator.store.tx_base import IN_CHUNK, Lockable, chunks
from coordinator.store.tx_dependencies import DependencyOps

NOTIFY_CHANNEL = "runwick_jobs_available"
"""The PostgreSQL channel that says claimable jobs appeared (docs/scaling.md)."""

_BY_ID = (("g_id", "id"),)
_FINISH_ATTEMPT = RowUpdate(
    attempts, _BY_ID, tuple((f"v_{c}", c) for c in FINISH_COLUMNS), condition="attempts.outcome IS NULL"
)
_MARK_STARTED = RowUpdate(
    attempts, _BY_ID, (("v_execution_number", "execution_number"), ("v_started_at_ms", "started_at_ms"))
)
_RECORD_PROGRESS = RowUpdate(attempts, _BY_ID, (("v_progress", "progress"),))
_JOB_GUARD = (("g_id", "id"), ("g_state", "state"), ("g_seq", "history_seq"))
"""A job update's guard (R-11): the state and history sequence the change was read with."""


# The reads and inserts every job goes through, built once (see ``Lockable``).
_JOBS_BY_IDS = Lockable(
    # Locks in id order so concurrent batches on PostgreSQL cannot deadlock.
    select(jobs).where(jobs.c.id.in_(bindparam("ids", expanding=True))).order_by(jobs.c.id)
)
_ATTEMPTS_BY_IDS = Prepared(select(attempts).where(attempts.c.id.in_(bindparam("ids", expanding=True))))
_ATTEMPTS_JOB_IDS = Prepared(
    select(attempts.c.job_id).where(attempts.c.id.in_(bindparam("ids", expanding=True)))
)
_JOBS_WITH_ATTEMPTS = Prepared(
    # PostgreSQL only: the attempts and their jobs, both locked, in one statement and one
    # round trip. ARRAY() runs the attempts' lookup once, first (an InitPlan), and the jobs
    # are then found by their primary key; a join on the job ids alone or ``IN (SELECT
    # ...)`` was planned as a merge join walking the jobs' primary key from the oldest job.
    # Rows are locked in jobs' id order (concurrent batches cannot deadlock), each job
    # before its attempt, the order every writer of attempts takes them in.
    select(jobs, attempts)
    .join_from(jobs, attempts, attempts.c.job_id == jobs.c.id)
    .where(
        text("jobs.id = ANY(ARRAY(SELECT named.job_id FROM attempts AS named WHERE named.id = ANY(:ids)))"),
        text("attempts.id = ANY(:ids)"),
    )
    .order_by(jobs.c.id)
    .with_for_update()
)
_ATTEMPT_COLUMNS = tuple(attempts.columns.keys())


@functools.cache
def _job_update(parameters: tuple[str, ...]) -> RowUpdate:
    """One guarded job UPDATE per set of columns (given as their ``v_<column>``
    parameters, ``changed_values``'s keys), built once (statement building costs more
    than SQLite's execution of it)."""
    stamped = (*parameters, "v_history_seq", "v_updated_at_ms")
    return RowUpdate(jobs, _JOB_GUARD, tuple((name, name.removeprefix("v_")) for name in stamped))


class Tx(ClaimOps, DependencyOps, AccessOps, HistoryOps):
    """The operations of one write transaction: jobs and attempts here; queues, claim
    reads, dependencies, tokens and the audit log in their mixins."""

    # -- reads that lock -------------------------------------------------------------

    def jobs_by_ids(self, ids: Iterable[str]) -> dict[str, JobRecord]:
        ordered = sorted(set(ids))
        found: dict[str, JobRecord] = {}
        for chunk in chunks(ordered):
            found.update((r.id, r) for r in jobs_from(self._read_locked(_JOBS_BY_IDS, {"ids": chunk})))
        return found

    def selected_jobs(
        self,
        *,
        states: Sequence[JobState],
        queue: str | None,
        wire_name: str | None,
        created_by_ms: int,
        after_id: str | None,
        limit: int,
    ) -> list[JobRecord]:
        """A bulk operation's next batch, locked: jobs in ``states`` (and ``queue``,
        ``wire_name`` when given) created by ``created_by_ms``, in id order after
        ``after_id``, at most ``limit``."""
        conditions = [jobs.c.state.in_([s.value for s in states]), jobs.c.created_at_ms <= created_by_ms]
        if queue is not None:
            conditions.append(jobs.c.queue == queue)
        if wire_name is not None:
            conditions.append(jobs.c.wire_name == wire_name)
        if after_id is not None:
            conditions.append(jobs.c.id > after_id)
        query = self._locked(select(jobs).where(*conditions).order_by(jobs.c.id).limit(limit))
        return list(jobs_from(self._conn.execute(query)))

    def attempts_by_ids(self, ids: Iterable[str]) -> dict[str, AttemptRecord]:
        found: dict[str, AttemptRecord] = {}
        for chunk in chunks(sorted(set(ids))):
            rows = _ATTEMPTS_BY_IDS.execute(self._conn, {"ids": chunk})
            found.update((r.id, r) for r in attempts_from(rows))
        return found

    def attempts_with_their_jobs(
        self, attempt_ids: Iterable[str]
    ) -> tuple[dict[str, AttemptRecord], dict[str, JobRecord]]:
        """These attempts and their jobs, the jobs locked first. An attempt's job never
        changes, so the lock can be taken through it; the attempts are read as they are
        once the lock is held, so a batch on another replica that ended one of them has
        committed by then and is seen, where reading them before could see one open and
        its job already ended.

        On PostgreSQL one statement locks both (``_JOBS_WITH_ATTEMPTS``): a row that was
        changed while the statement waited for its lock is returned as that change
        committed it (READ COMMITTED re-reads a locked row's newest version), for the
        attempts as for the jobs. On SQLite, whose single writer holds the database from
        the transaction's first statement (``BEGIN IMMEDIATE``), nothing can commit
        between two reads, so the attempts are read first and name their jobs."""
        ordered = sorted(set(attempt_ids))
        if not ordered:  # a batch of claims only (an enqueue's): nothing to read
            return {}, {}
        if not self._postgres:
            found = self.attempts_by_ids(ordered)
            return found, self.jobs_by_ids(attempt.job_id for attempt in found.values())
        if len(ordered) <= IN_CHUNK:
            rows = _JOBS_WITH_ATTEMPTS.execute(self._conn, {"ids": ordered}).rows
            split = len(JOB_COLUMNS)
            job_rows = DriverRows(JOB_COLUMNS, [row[:split] for row in rows])
            attempt_rows = DriverRows(_ATTEMPT_COLUMNS, [row[split:] for row in rows])
            locked = {job.id: job for job in jobs_from(job_rows)}  # a job once per attempt
            return {attempt.id: attempt for attempt in attempts_from(attempt_rows)}, locked
        # Locked in one id order across chunks, so concurrent batches cannot deadlock.
        job_ids: set[str] = set()
        for chunk in chunks(ordered):
            job_ids.update(_ATTEMPTS_JOB_IDS.execute(self._conn, {"ids": chunk}).scalars())
        locked = self.jobs_by_ids(job_ids)
        return self.attempts_by_ids(ordered), locked  # the attempts after the lock (see above)

    def jobs_by_idempotency_keys(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], JobRecord]:
        """The jobs with these ``(queue, idempotency_key)``: keys are per queue, so a job of
        another queue with the same key is never found (nor read)."""
        wanted = set(keys)
        found: dict[tuple[str, str], JobRecord] = {}
        queues = sorted({queue for queue, _ in wanted})
        for chunk in chunks(sorted({key for _, key in wanted})):
            query = select(jobs).where(jobs.c.queue.in_(queues), jobs.c.idempotency_key.in_(chunk))
            for job in jobs_from(self._conn.execute(query)):
                if job.idempotency_key and (job.queue, job.idempotency_key) in wanted:
                    found[(job.queue, job.idempotency_key)] = job
        return found

    def unfinished_by_unique_keys(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], JobRecord]:
        """The jobs that have not ended among those with these ``(queue, wire_name,
        unique_key)``."""
        wanted = set(keys)
        found: dict[tuple[str, str, str], JobRecord] = {}
        queues = sorted({queue for queue, _, _ in wanted})
        wire_names = sorted({wire_name for _, wire_name, _ in wanted})
        for chunk in chunks(sorted({key for _, _, key in wanted})):
            rows = self._conn.execute(
                select(jobs).where(
                    text(UNIQUE_UNFINISHED_PREDICATE),  # the index's own, so planners use it
                    jobs.c.queue.in_(queues),
                    jobs.c.wire_name.in_(wire_names),
                    jobs.c.unique_key.in_(chunk),
                )
            )
            for job in jobs_from(rows):
                assert job.unique_key is not None
                if (job.queue, job.wire_name, job.unique_key) in wanted:
                    found[(job.queue, job.wire_name, job.unique_key)] = job
        return found

    def expired_leases(self, now_ms: int, limit: int) -> list[JobRecord]:
        query = (
            select(jobs)
            .where(text(LEASED_PREDICATE), jobs.c.lease_expires_at_ms <= now_ms)
            # No order: the leased jobs are few (as many as the workers run) but sorting
            # them would read all of them; SKIP LOCKED means no lock order is needed.
            .limit(limit)
        )
        return list(jobs_from(self._conn.execute(self._locked(query, skip_locked=True))))

    def due_scheduled(self, now_ms: int, limit: int) -> list[JobRecord]:
        query = (
            select(jobs)
            .where(text(SCHEDULED_PREDICATE), jobs.c.run_at_ms <= now_ms)  # walks ix_jobs_scheduled
            .order_by(jobs.c.run_at_ms)
            .limit(limit)
        )
        return list(jobs_from(self._conn.execute(self._locked(query, skip_locked=True))))

    def any_leased(self) -> bool:
        """Whether any job is reserved or running (one entry of ix_jobs_leased)."""
        query = select(jobs.c.id).where(text(LEASED_PREDICATE)).limit(1)
        return self._conn.execute(query).first() is not None

    def any_scheduled(self) -> bool:
        """Whether any job waits for its run-at (one entry of ix_jobs_scheduled)."""
        query = select(jobs.c.id).where(text(SCHEDULED_PREDICATE)).limit(1)
        return self._conn.execute(query).first() is not None

    # -- job writes ------------------------------------------------------------------

    def notify_jobs_available(self, job_ids: Iterable[str] | None = None) -> None:
        """Wakes idle dispatchers on every replica when this transaction commits.

        ``job_ids``: the jobs this write made claimable, when the caller knows them
        (an enqueue): if this transaction's own claims take every one of them, no other
        replica could claim anything and none is woken. None: not known which; the
        notification is sent. It goes out once, just before the commit
        (``send_notification``): NOTIFY takes a global lock at commit, so it must never
        be one per row, and a notification is only delivered at the commit anyway. Its
        payload is the store's origin, so the replica that wrote it, which has already
        woken its own dispatcher, does not claim again for it. No-op on SQLite, which
        has one coordinator process.
        """
        if not self._postgres:
            return
        if job_ids is None:
            self._notify_anyway = True
        else:
            self._to_announce.update(job_ids)

    def send_notification(self) -> None:
        """Sends the notification asked for (``notify_jobs_available``), if jobs are
        left to announce, with the writes still held (``before_commit``)."""
        if self._held is not None and (self._notify_anyway or self._to_announce):
            self._held.notify(NOTIFY_CHANNEL, self.origin)
        self._notify_anyway = False
        self._to_announce.clear()

    def before_commit(self) -> None:
        """What goes out just before the commit (``Store`` calls it): the count deltas,
        the notification and every write still held, in one statement on PostgreSQL;
        nothing when a guard failed (``check_guards``)."""
        self.check_guards()
        self.write_counts()
        self.send_notification()
        self._send_held()

    def insert_jobs(self, new_jobs: Sequence[JobRecord], now_ms: int, *, ids_made_here: bool = False) -> None:
        """Inserts new jobs and their first transitions; raises DuplicateKey when an
        idempotency key is taken.

        ``ids_made_here``: no ID was chosen by a client, so only a key can collide. On
        PostgreSQL jobs without keys are then held (``store.pg_held``), to go out with the
        transaction's next statement (a claim's read, which so sees them, or the commit's)."""
        if not new_jobs:
            return
        may_collide = not ids_made_here or any(job.idempotency_key or job.unique_key for job in new_jobs)
        if may_collide:
            self._send_held()  # an error of an earlier write is not a taken key
        self._inserted_jobs.update(job.id for job in new_jobs)
        first_transitions = [
            {
                "job_id": job.id,
                "seq": job.history_seq,
                "at_ms": now_ms,
                "from_state": None,
                "to_state": job.state.value,
                "attempt_id": None,
                "reason": "enqueued",
            }
            for job in new_jobs
        ]
        try:
            self._insert_rows(jobs, [job_row(job) for job in new_jobs])
            self._insert_rows(transitions, first_transitions)
            if may_collide:
                self._send_held()  # now, so that a taken key is told apart (one statement for both)
        except IntegrityError as exc:
            if not unique_violation(exc):
                raise  # a broken constraint, no race: the store reports it as it is (``driver_errors``)
            # Not the driver's text: its DETAIL quotes the key's value.
            raise DuplicateKey("a new job's idempotency key was taken by a concurrent enqueue") from exc
        self.count_jobs(Counter((job.queue, job.state.value) for job in new_jobs))

    def apply(self, changes: Sequence[JobChange], now_ms: int) -> None:
        """Writes the changes, each job guarded by the state and history sequence its
        first change was read with (R-11), and records one transition per change (a
        start's is read back from its attempt, ``store.history``).

        Several changes to one job are folded into one UPDATE; updates that set the
        same columns go out together. Raises WriteConflict when any guard fails (on
        PostgreSQL when the held writes go out, ``store.pg_held``); the caller's
        transaction then rolls back whole.
        """
        if not changes:
            return
        folded: dict[str, list[JobChange]] = {}
        for change in changes:
            folded.setdefault(change.before.id, []).append(change)
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        history: list[dict[str, Any]] = []
        moved: Counter[tuple[str, str]] = Counter()
        for job_changes in folded.values():
            first, last = job_changes[0].before, job_changes[-1].after
            seq = first.history_seq
            # Each state's text once: a change starts where the one before it ended.
            first_state = state = first.state.value
            for change in job_changes:
                seq += 1
                from_state, state = state, change.after.state.value
                history.append(
                    {
                        "job_id": first.id,
                        "seq": seq,
                        "at_ms": now_ms,
                        "from_state": from_state,
                        "to_state": state,
                        "attempt_id": change.attempt_id,
                        "reason": change.reason,
                    }
                )
            row = changed_values(first, last)
            columns = tuple(row)  # in field order, so one tuple per set of columns
            row.update(v_history_seq=seq, v_updated_at_ms=now_ms, g_id=first.id)
            row.update(g_state=first_state, g_seq=first.history_seq)
            groups.setdefault(columns, []).append(row)
            if state != first_state:  # ``state`` is now the last change's
                moved[(first.queue, first_state)] -= 1
                moved[(first.queue, state)] += 1
        for columns, rows in groups.items():
            self._update_rows(_job_update(columns), rows, conflict="job changed under a write")
        self.count_jobs(moved)
        self.write_history(history)

    def insert_attempts(self, new_attempts: Sequence[NewAttempt]) -> None:
        self._insert_rows(attempts, [new_attempt_row(a) for a in new_attempts])

    def finish_attempts(self, ends: Sequence[AttemptEnd]) -> None:
        """Records attempts' ends; raises WriteConflict if any already has an outcome (on
        PostgreSQL when the held writes go out)."""
        params = [attempt_end_params(end) for end in ends]
        self._update_rows(_FINISH_ATTEMPT, params, conflict="attempt already has an outcome")

    def mark_started(self, started: Sequence[tuple[str, int]], now_ms: int) -> None:
        """Records the start of each ``(attempt_id, execution_number)``."""
        rows = [{"g_id": a, "v_execution_number": n, "v_started_at_ms": now_ms} for a, n in started]
        self._update_rows(_MARK_STARTED, rows)

    def renew_leases(
        self, attempt_ids: Sequence[str], lease_until_ms: int, holder: WorkerIdentity, now_ms: int
    ) -> dict[str, bool]:
        """R-10: extends the leases of the current attempts among ``attempt_ids`` that
        ``holder`` holds (claimed by its worker ID with its token) and that have not
        lapsed. A lease past its deadline is over even before expiry has recorded it: the
        heartbeat hears ``lost``, the same answer it gets once expiry ran, so whether the
        job is retried never depends on which of the two came first.

        One statement for the whole heartbeat. Returns the attempt IDs renewed, each with
        its job's cancel-requested flag (R-8: the heartbeat answer repeats the cancel, so
        it reaches a worker connected to another replica); the rest are lost to the worker.
        """
        renewed: dict[str, bool] = {}
        for chunk in chunks(sorted(set(attempt_ids))):
            held = select(attempts.c.id).where(
                attempts.c.id.in_(chunk), attempts.c.token_id.is_not_distinct_from(holder.token_id)
            )
            conditions = [
                jobs.c.current_attempt_id.in_(held),
                jobs.c.worker_id == holder.worker_id,
                jobs.c.state.in_([s.value for s in LEASED_STATES]),
                jobs.c.lease_expires_at_ms > now_ms,
            ]
            if holder.queues is not None:
                conditions.append(jobs.c.queue.in_(sorted(holder.queues)))
            statement = (
                update(jobs)
                .where(*conditions)
                .values(lease_expires_at_ms=lease_until_ms)
                .returning(jobs.c.current_attempt_id, jobs.c.cancel_requested)
            )
            renewed.update((row[0], bool(row[1])) for row in self._conn.execute(statement))
        return renewed

    def record_progress(self, reports: Mapping[str, str]) -> None:
        """Stores each attempt's latest progress report (stored form, by attempt ID).
        Only for attempts a heartbeat of this transaction just renewed: the caller
        drops the reports of lost ones."""
        rows = [{"g_id": attempt_id, "v_progress": text} for attempt_id, text in sorted(reports.items())]
        self._update_rows(_RECORD_PROGRESS, rows)

    # -- schedules (R-18) --------------------------------------------------------------

    @property
    def schedules(self) -> ScheduleWrites:
        """The schedule operations of this transaction (``store.schedules``)."""
        return ScheduleWrites(self._conn, self._postgres)

    # -- retention (R-19; the SQL is in ``store.purge``) ----------------------------------

    def purge(self, state: JobState, finished_before_ms: int, limit: int) -> int:
        """Removes up to ``limit`` (clamped to ``max_purge_batch``) jobs in the terminal
        ``state`` that finished before ``finished_before_ms``, with their attempts,
        history and own dependency rows; returns how many. See ``store.purge``."""
        removed = purge_jobs(
            self._conn, self._postgres, state, finished_before_ms, self.bounds.clamp_purge_batch(limit)
        )
        self.count_jobs({(queue, state.value): -count for queue, count in removed.items()})
        return sum(removed.values())

    def purge_selected(self, ids: Sequence[str], states: Sequence[JobState]) -> int:
        """Removes the jobs of ``ids`` (a bulk purge's batch, from ``selected_jobs``)
        that are in one of the terminal ``states``, as ``purge`` removes them; returns
        how many."""
        removed = remove_jobs(self._conn, ids, states)
        self.count_jobs({key: -count for key, count in removed.items()})
        return sum(removed.values())
