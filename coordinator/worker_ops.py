"""The worker protocol's writes, batched: claims, starts, heartbeats, results, releases
and lease expiry, each batch in one transaction (SPEC §8, STYLE 10).

Every job write is conditional on the state and history sequence read in the same
transaction (R-11); rows are locked on PostgreSQL, and SQLite has a single writer.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import Clock
from coordinator.domain.ids import parse_id, uuid7
from coordinator.domain.lifecycle import (
    Decision,
    Report,
    decide_lease_expiry,
    decide_release,
    decide_result,
    decide_start,
)
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import CoordinatorError, InvalidArgument, JobOutputTooLarge, NotFound
from coordinator.store import AttemptRecord, JobRecord, Store, WriteConflict
from coordinator.store.store import JobChange, WriteTx
from coordinator.validation import quote

log = logging.getLogger(__name__)

_WRITE_RETRIES = 3


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    count: int
    lease_ms: int


@dataclass(frozen=True, slots=True)
class Claimed:
    job: JobRecord
    attempt_id: str
    lease_expires_at_ms: int


@dataclass(frozen=True, slots=True)
class ResultReport:
    attempt_id: str
    report: Report
    output: bytes | None = None


@dataclass(frozen=True, slots=True)
class StartAnswer:
    attempt_id: str
    granted: bool
    execution_number: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ResultAnswer:
    attempt_id: str
    accepted: bool
    job_state: JobState | None = None
    retry_delay_ms: int | None = None
    reason: str = ""
    error: CoordinatorError | None = None
    """Set when the result itself was refused (unknown attempt, output over
    ``max_output_bytes``, invalid field): nothing was written, and resending the same
    result cannot succeed. Without it, a refused result is stale (R-11)."""


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A start granted in a batch: how long the job had been due when it started."""

    queue: str
    wire_name: str
    waited_ms: int


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """An attempt that ended in a batch or a maintenance pass, and what became of its job."""

    queue: str
    wire_name: str
    outcome: Outcome
    job_state: JobState
    ran_ms: int | None
    """From start to the reported result; None when no run ended here (release, lapse)."""
    lease_lapsed: bool = False
    """The coordinator ended it because its lease lapsed (R-4, R-5 abandoned)."""


@dataclass(slots=True)
class WorkBatch:
    """What arrived from all streams in one batch window."""

    releases: list[str] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    heartbeats: list[tuple[list[str], int]] = field(default_factory=list)
    results: list[ResultReport] = field(default_factory=list)
    claims: list[ClaimRequest] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.releases or self.starts or self.heartbeats or self.results or self.claims)


@dataclass(slots=True)
class BatchAnswers:
    starts: list[StartAnswer] = field(default_factory=list)
    lost: list[set[str]] = field(default_factory=list)
    """For each heartbeat, in order: the attempts no longer recognised (R-10)."""
    cancels: list[set[str]] = field(default_factory=list)
    """For each heartbeat, in order: the attempts whose job a user cancelled (R-8)."""
    lease_expires_at_ms: list[int] = field(default_factory=list)
    results: list[ResultAnswer] = field(default_factory=list)
    claims: list[list[Claimed]] = field(default_factory=list)
    terminal_job_ids: set[str] = field(default_factory=set)
    available_changed: bool = False
    next_run_at_ms: int | None = None
    """The earliest run-at this batch scheduled (a retry), so the dispatcher can wake."""
    started: list[RunStarted] = field(default_factory=list)
    """Starts granted (facts for metrics, as are ``ended``)."""
    ended: list[AttemptEnded] = field(default_factory=list)

    def notified(self, tx: WriteTx) -> BatchAnswers:
        """Tells other replicas, at commit, when this batch made jobs claimable."""
        if self.available_changed:
            tx.notify_jobs_available()
        return self


class WorkerOps:
    def __init__(
        self, store: Store, clock: Clock, config: CoordinatorConfig, rng: random.Random | None = None
    ):
        self.store = store
        self.clock = clock
        self.config = config
        self.rng = rng or random.Random()

    def process(self, batch: WorkBatch) -> BatchAnswers:
        """Carries out a whole batch in one transaction, retried whole on a conflict."""
        for attempt in range(_WRITE_RETRIES):
            try:
                with self.store.write() as tx:
                    return _BatchRun(tx, self, self.clock.now_ms()).run(batch).notified(tx)
            except WriteConflict:
                log.warning("write conflict in a worker batch (try %d); retrying", attempt + 1)
        raise WriteConflict("worker batch kept conflicting")

    def expire_leases(self) -> BatchAnswers:
        """R-4/R-5: recovers jobs whose lease lapsed. Safe with any number of replicas:
        rows are taken with SKIP LOCKED and every write is conditional."""
        with self.store.write() as tx:
            run = _BatchRun(tx, self, self.clock.now_ms())
            for job in tx.expired_leases(run.now, self.config.maintenance_batch):
                decision = decide_lease_expiry(job.view(), run.now, self.rng)
                run.end_attempt(job, decision, reported=False, lease_lapsed=True)
            run.flush()
            return run.answers.notified(tx)

    def promote_due(self) -> BatchAnswers:
        """Moves scheduled jobs whose run-at has come to ``available``.

        Claims take due scheduled jobs directly, so this only keeps states truthful for
        readers; it also tells the dispatcher that work is there.
        """
        with self.store.write() as tx:
            run = _BatchRun(tx, self, self.clock.now_ms())
            due = tx.due_scheduled(run.now, self.config.maintenance_batch)
            tx.apply(
                [JobChange(job, {"state": JobState.AVAILABLE.value}, reason="due") for job in due], run.now
            )
            run.answers.available_changed = bool(due)
            return run.answers.notified(tx)


class _BatchRun:
    """One batch inside one transaction; keeps the freshest copy of each job it touched
    (by job ID; an attempt finds its job through its row) so several messages about one
    job in a batch see each other's effect."""

    def __init__(self, tx: WriteTx, ops: WorkerOps, now: int) -> None:
        self.tx = tx
        self.ops = ops
        self.now = now
        self.answers = BatchAnswers()
        self._jobs: dict[str, JobRecord] = {}
        self._attempts: dict[str, AttemptRecord] = {}
        # Writes are gathered and sent as few statements as possible at flush().
        self._changes: list[JobChange] = []
        self._started: list[tuple[str, int]] = []
        self._finished: list[dict[str, Any]] = []
        self._new_attempts: list[dict[str, Any]] = []

    def flush(self) -> None:
        """Sends the gathered writes: job updates first (attempt rows refer to them)."""
        self.tx.apply(self._changes, self.now)
        self.tx.insert_attempts(self._new_attempts)
        self.tx.mark_started_many(self._started, self.now)
        self.tx.finish_attempts(self._finished)
        self._changes, self._started, self._finished, self._new_attempts = [], [], [], []

    def run(self, batch: WorkBatch) -> BatchAnswers:
        ids = batch.releases + batch.starts + [r.attempt_id for r in batch.results]
        self._attempts = self.tx.attempts_by_ids(filter(_well_formed, ids))
        self._jobs = self.tx.jobs_by_ids(a.job_id for a in self._attempts.values())
        for attempt_id in batch.releases:
            self._release(attempt_id)
        self.answers.starts = [self._start(attempt_id) for attempt_id in batch.starts]
        for attempt_ids, lease_ms in batch.heartbeats:
            renewed = self.tx.renew_leases(list(filter(_well_formed, attempt_ids)), self.now + lease_ms)
            self.answers.lost.append(set(attempt_ids) - set(renewed))
            self.answers.cancels.append({a for a, cancel_requested in renewed.items() if cancel_requested})
            self.answers.lease_expires_at_ms.append(self.now + lease_ms)
        self.answers.results = [self._result(r) for r in batch.results]
        if batch.claims:
            self.flush()  # claims read the database: it must see this batch's releases
        self.answers.claims = [self._claim(request) for request in batch.claims]
        self.flush()
        return self.answers

    def _current(self, attempt_id: str) -> JobRecord | None:
        """The job of ``attempt_id`` while that attempt is still its current one."""
        attempt = self._attempts.get(attempt_id)
        job = self._jobs.get(attempt.job_id) if attempt is not None else None
        return job if job is not None and job.current_attempt_id == attempt_id else None

    def _change(
        self, job: JobRecord, values: dict[str, Any], reason: str | None, attempt_id: str | None
    ) -> JobRecord:
        self._changes.append(JobChange(job, values, reason=reason, attempt_id=attempt_id))
        typed: dict[str, Any] = {k: (JobState(v) if k == "state" else v) for k, v in values.items()}
        updated = replace(job, **typed, history_seq=job.history_seq + 1, updated_at_ms=self.now)
        self._jobs[job.id] = updated
        return updated

    def _release(self, attempt_id: str) -> None:
        job = self._current(attempt_id)
        if job is None or job.state is not JobState.RESERVED:
            return  # already recovered or never ours: nothing to give back
        self.end_attempt(job, decide_release(job.view(), self.now), reported=True)

    def _start(self, attempt_id: str) -> StartAnswer:
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            return StartAnswer(attempt_id, False, reason="unknown attempt")
        if attempt.started_at_ms is not None:
            # a repeated start gets the first answer.
            return StartAnswer(attempt_id, True, attempt.execution_number)
        job = self._current(attempt_id)
        if job is None:
            return StartAnswer(attempt_id, False, reason="superseded attempt")
        decision = decide_start(job.view(), attempt_id)
        if not decision.granted:
            return StartAnswer(attempt_id, False, reason=decision.reason)
        self._change(
            job,
            {"state": JobState.RUNNING.value, "executions": decision.execution_number, "unstarted_streak": 0},
            "started",
            attempt_id,
        )
        self._started.append((attempt_id, decision.execution_number))
        self.answers.started.append(RunStarted(job.queue, job.wire_name, max(self.now - job.run_at_ms, 0)))
        self._attempts[attempt_id] = replace(
            attempt, started_at_ms=self.now, execution_number=decision.execution_number
        )
        return StartAnswer(attempt_id, True, decision.execution_number)

    def _result(self, result: ResultReport) -> ResultAnswer:
        attempt_id = result.attempt_id
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            return _refused(attempt_id, _unknown_attempt("result.attempt_id", attempt_id))
        if attempt.outcome is not None:
            # a repeat gets the first answer and changes nothing. A release is
            # reported too, but it was no result: a result after it is stale.
            if attempt.reported and attempt.outcome is not Outcome.RELEASED:
                return ResultAnswer(attempt_id, True, attempt.job_state_after, attempt.retry_delay_ms)
            return ResultAnswer(attempt_id, False, reason=f"attempt already ended {attempt.outcome.value}")
        job = self._current(attempt_id)
        if job is None or job.state is not JobState.RUNNING:
            return ResultAnswer(attempt_id, False, reason="superseded attempt")
        bounds = self.tx.bounds
        if (
            result.report.outcome is Outcome.SUCCEEDED
            and result.output is not None
            and len(result.output) > bounds.max_output_bytes
        ):
            # SPEC §5: rejected before anything is written; the worker then reports
            # output_too_large as a permanent failure.
            return _refused(
                attempt_id, JobOutputTooLarge(job.id, len(result.output), bounds.max_output_bytes)
            )
        report = _without_nul(result.report)
        decision = decide_result(
            job.view(),
            report,
            self.now,
            bounds.max_failure_detail_bytes,
            self.ops.rng,
            max_message_bytes=bounds.max_failure_message_bytes,
        )
        output = result.output if decision.job_state is JobState.SUCCEEDED else None
        ran_ms = None if attempt.started_at_ms is None else max(self.now - attempt.started_at_ms, 0)
        self.end_attempt(job, decision, reported=True, output=output, report=report, ran_ms=ran_ms)
        # A repeat of this result later in the same batch must see it.
        self._attempts[attempt_id] = replace(
            attempt,
            outcome=decision.attempt_outcome,
            retry_delay_ms=decision.retry_delay_ms,
            job_state_after=decision.job_state,
            reported=True,
        )
        return ResultAnswer(attempt_id, True, decision.job_state, decision.retry_delay_ms)

    def end_attempt(
        self,
        job: JobRecord,
        decision: Decision,
        *,
        reported: bool,
        output: bytes | None = None,
        report: Report | None = None,
        ran_ms: int | None = None,
        lease_lapsed: bool = False,
    ) -> None:
        """Writes an attempt's end and the job's next state from one decision."""
        attempt_id = job.current_attempt_id
        assert attempt_id is not None
        values: dict[str, Any] = {
            "state": decision.job_state.value,
            "current_attempt_id": None,
            "worker_id": None,
            "lease_expires_at_ms": None,
            "unstarted_streak": decision.unstarted_streak,
        }
        job_code = decision.job_error_code or decision.error_code
        if job_code is not None:
            values["last_error_code"] = job_code
        if decision.run_at_ms is not None:
            values["run_at_ms"] = decision.run_at_ms
        if decision.job_state.terminal:
            values["finished_at_ms"] = self.now
            self.answers.terminal_job_ids.add(job.id)
        if output is not None:
            values["output"] = output
        self._change(job, values, job_code or decision.attempt_outcome.value, attempt_id)
        self._finished.append(
            {
                "id": attempt_id,
                "finished_at_ms": self.now,
                "outcome": decision.attempt_outcome.value,
                "error_code": decision.error_code,
                "exception_type": (report.exception_type or None) if report else None,
                "message": decision.message or None,
                "detail": decision.detail or None,
                "retry_delay_ms": decision.retry_delay_ms,
                "job_state_after": decision.job_state.value,
                "reported": reported,
            }
        )
        if decision.attempt_outcome is Outcome.RELEASED or decision.job_state is JobState.AVAILABLE:
            self.answers.available_changed = True
        self.answers.ended.append(
            AttemptEnded(
                job.queue, job.wire_name, decision.attempt_outcome, decision.job_state, ran_ms, lease_lapsed
            )
        )
        if decision.job_state is JobState.SCHEDULED and decision.run_at_ms is not None:
            current = self.answers.next_run_at_ms
            self.answers.next_run_at_ms = min(current, decision.run_at_ms) if current else decision.run_at_ms

    def _claim(self, request: ClaimRequest) -> list[Claimed]:
        limit = self.tx.bounds.clamp_claim_batch(request.count)  # SPEC §5: clamp silently
        if limit <= 0 or not request.wire_names:
            return []
        claimed = []
        lease_until = self.now + request.lease_ms
        for job in self.tx.claimable(request.queues, request.wire_names, self.now, limit):
            attempt_id = uuid7(self.now)
            updated = self._change(
                job,
                {
                    "state": JobState.RESERVED.value,
                    "current_attempt_id": attempt_id,
                    "worker_id": request.worker_id,
                    "lease_expires_at_ms": lease_until,
                },
                "claimed",
                attempt_id,
            )
            self._new_attempts.append(
                {
                    "id": attempt_id,
                    "job_id": job.id,
                    "generation": job.generation,
                    "worker_id": request.worker_id,
                    "execution_number": 0,
                    "claimed_at_ms": self.now,
                    "reported": False,
                }
            )
            claimed.append(Claimed(updated, attempt_id, lease_until))
        # The next request's query must not see these jobs as claimable.
        self.flush()
        return claimed


def _refused(attempt_id: str, error: CoordinatorError) -> ResultAnswer:
    return ResultAnswer(attempt_id, False, reason=str(error), error=error)


def _unknown_attempt(field: str, attempt_id: str) -> CoordinatorError:
    if not _well_formed(attempt_id):
        return InvalidArgument(
            field, f"{quote(attempt_id)} is not an attempt ID (a lowercase UUID)", reason="INVALID_ID"
        )
    return NotFound(
        f"attempt {attempt_id} does not exist (never assigned, or removed by retention)",
        reason="ATTEMPT_NOT_FOUND",
        metadata={"attempt_id": attempt_id},
    )


def _well_formed(attempt_id: str) -> bool:
    """Only IDs in the stored form can name an attempt; anything else (a NUL, which
    PostgreSQL refuses outright and would fail the whole batch) is unknown."""
    return parse_id(attempt_id) == attempt_id


def _without_nul(report: Report) -> Report:
    """PostgreSQL text cannot hold NUL; replace it on both engines so they store alike."""
    if "\x00" not in report.exception_type + report.message + report.detail:
        return report
    return replace(
        report,
        exception_type=report.exception_type.replace("\x00", "\ufffd"),
        message=report.message.replace("\x00", "\ufffd"),
        detail=report.detail.replace("\x00", "\ufffd"),
    )


__all__ = [
    "AttemptEnded",
    "AttemptRecord",
    "BatchAnswers",
    "ClaimRequest",
    "Claimed",
    "ResultAnswer",
    "ResultReport",
    "RunStarted",
    "StartAnswer",
    "WorkBatch",
    "WorkerOps",
]
