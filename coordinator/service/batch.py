"""The worker protocol's writes, batched: claims, starts, heartbeats, results and
releases, with the enqueue and cancel calls pending, each batch in one transaction
(docs/scaling.md).

Every job write is conditional on the state and history sequence read in the same
transaction (R-11); rows are locked on PostgreSQL, and SQLite has a single writer.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import may_serve
from coordinator.domain.clock import Clock
from coordinator.domain.evolve import evolve
from coordinator.domain.ids import parse_id, uuid7
from coordinator.domain.lifecycle import (
    Report,
    decide_release,
    decide_result,
    decide_start,
)
from coordinator.domain.records import AttemptRecord, JobRecord, NewAttempt, WorkerIdentity
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import (
    CoordinatorError,
    FailedPrecondition,
    InvalidArgument,
    JobOutputTooLarge,
    NotFound,
    PermissionDenied,
)
from coordinator.service.cancel_items import write_cancels
from coordinator.service.effects import RunStarted
from coordinator.service.enqueue_items import CheckedItem, check_items, write_items
from coordinator.service.jobs import JobsService
from coordinator.service.manage import ManagementService
from coordinator.service.work import (
    AttemptMessage,
    BatchAnswers,
    Claimed,
    ClaimRequest,
    HeartbeatAnswer,
    ResultAnswer,
    ResultReport,
    StartAnswer,
    StartJoin,
    WorkBatch,
)
from coordinator.service.writes import JobWrites
from coordinator.store import Store, Tx
from coordinator.store.claim_rates import key_of
from coordinator.store.claims import ClaimWanted
from coordinator.store.tx_dependencies import ParentOutput
from coordinator.validation import quote

log = logging.getLogger(__name__)


class WorkerOps:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        config: CoordinatorConfig,
        rng: random.Random | None = None,
        jobs: JobsService | None = None,
    ):
        self.store = store
        self.clock = clock
        self.config = config
        self.rng = rng or random.Random()
        self.jobs = jobs or JobsService(store, clock, config, self.rng)
        """Checks the batch's enqueue items (``service.enqueue_items``)."""
        self.manage = ManagementService(store, clock)
        """Carries out the batch's cancel items (``service.cancel_items``)."""

    def process(self, batch: WorkBatch) -> BatchAnswers:
        """Carries out a whole batch in one transaction, retried whole on a conflict. Its
        enqueue items are checked first, once: one that fails its checks is answered
        with its error and never reaches the transaction."""
        enqueued_at = self.clock.now_ms()
        checked = check_items(self.jobs, batch.enqueues, enqueued_at) if batch.enqueues else []

        def body(tx: Tx) -> BatchAnswers:
            # Each try reads its own times (``_BatchRun``): one run again after a lost
            # connection or a conflict must not stamp the time its failed try began.
            return _BatchRun(tx, self).run(batch, checked, enqueued_at)

        return self.store.transact(body, what="a worker batch")


class _BatchRun:
    """One batch inside one transaction; finds each attempt's job through its row and
    keeps the freshest copy of each job it touched (by job ID).

    Its times are read after the locks the writes stamped with them waited for, never
    before (issue 39): the worker messages' time once their attempts' rows are locked,
    the claims' once ``Tx.claim`` has locked the queue rows and counted what its limits
    keep. A stamp read before a wait could fall before the end of an attempt that
    another replica committed meanwhile, and which the claim's counts already saw."""

    def __init__(self, tx: Tx, ops: WorkerOps) -> None:
        self.tx = tx
        self.ops = ops
        self.now = ops.clock.now_ms()
        self.answers = BatchAnswers()
        self.writes = JobWrites(tx, self.now, self.answers)
        self._jobs: dict[str, JobRecord] = {}
        self._attempts: dict[str, AttemptRecord] = {}
        self._made: list[NewAttempt] = []
        """The attempts this try's claims made (the joined starts check against them)."""
        self._starts: list[tuple[str, str, int]] = []
        """The starts granted, (queue, key, when), not counted against rates yet."""

    def run(
        self, batch: WorkBatch, enqueues: Sequence[CheckedItem | CoordinatorError] = (), enqueued_at: int = 0
    ) -> BatchAnswers:
        ids = [m.attempt_id for m in batch.releases + batch.starts] + [r.attempt_id for r in batch.results]
        self._attempts, self._jobs = self.tx.attempts_with_their_jobs(filter(_well_formed, ids))
        self._tick()  # the rows are locked: what the messages decide is decided from now
        for release in batch.releases:
            self._release(release)
        self.answers.starts = [self._start(start) for start in batch.starts]
        self._count_starts()
        for heartbeat in batch.heartbeats:
            attempt_ids, lease_until = heartbeat.attempt_ids, self.now + heartbeat.lease_ms
            renewed = self.tx.renew_leases(
                list(filter(_well_formed, attempt_ids)), lease_until, heartbeat.sender, self.now
            )
            if heartbeat.progress:
                # A lost attempt's report changes nothing, like any stale message.
                self.tx.record_progress({a: p for a, p in heartbeat.progress.items() if a in renewed})
            self.answers.heartbeats.append(
                HeartbeatAnswer(
                    lost=set(attempt_ids) - set(renewed),
                    lease_expires_at_ms=lease_until,
                    cancels=frozenset(a for a, cancel_requested in renewed.items() if cancel_requested),
                )
            )
        self.answers.results = [self._result(r) for r in batch.results]
        if enqueues:
            # After the worker messages, so that each item's savepoint holds its own
            # writes only; before the claims, which take its jobs.
            self.writes.flush()
            self.answers.enqueued = write_items(self.tx, enqueues, enqueued_at)
        if batch.cancels:
            # Before the claims: a job cancelled here is not handed out.
            self.writes.flush()
            self.answers.cancelled = write_cancels(self.tx, self.ops.manage, batch.cancels)
        if batch.claims:
            self.writes.flush()  # claims read the database: it must see this batch's releases
            self._claim(batch.claims)
            if batch.joining is not None:
                self._join_starts(batch.joining)
        self.writes.flush()
        return self.answers

    def _tick(self) -> int:
        """Moves the batch's time to the clock's now (never back: a clock whose offset
        was corrected may read earlier, R-13); the flush stamps each write with it."""
        self.now = max(self.now, self.ops.clock.now_ms())
        self.writes.now = self.now
        return self.now

    def _count_starts(self) -> None:
        """Counts the starts granted so far against their queues' rates (issue 41)."""
        if self._starts:
            self.tx.count_rate_starts(self._starts)
            self._starts = []

    def _current(self, attempt_id: str) -> JobRecord | None:
        """The job of ``attempt_id`` while that attempt is still its current one."""
        attempt = self._attempts.get(attempt_id)
        job = self._jobs.get(attempt.job_id) if attempt is not None else None
        return job if job is not None and job.current_attempt_id == attempt_id else None

    def _held(self, attempt: AttemptRecord, sender: WorkerIdentity | None) -> bool:
        """Whether ``sender`` is the stream that holds ``attempt``: the worker and token
        that claimed it, with the job in the token's queues. Nobody else may act on it."""
        job = self._jobs.get(attempt.job_id)
        return sender is not None and job is not None and sender.holds(attempt, job.queue)

    def _keep(self, job: JobRecord) -> JobRecord:
        self._jobs[job.id] = job
        return job

    def _release(self, release: AttemptMessage) -> None:
        attempt = self._attempts.get(release.attempt_id)
        if attempt is None or not self._held(attempt, release.sender):
            return  # not this stream's to give back
        job = self._current(release.attempt_id)
        if job is None or job.state is not JobState.RESERVED:
            return  # already recovered: nothing to give back
        self._keep(self.writes.end_attempt(job, decide_release(job, self.now), reported=True))

    def _start(self, start: AttemptMessage) -> StartAnswer:
        attempt_id = start.attempt_id
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            return StartAnswer(attempt_id, False, reason="unknown attempt")
        if not self._held(attempt, start.sender):
            return StartAnswer(attempt_id, False, reason="attempt held by another worker")
        job = self._current(attempt_id)
        if attempt.started_at_ms is not None:
            # a repeated start gets the first answer, but only while the attempt is
            # still running: one that ended (its lease lapsed) must not run its handler.
            if job is not None and job.state is JobState.RUNNING:
                return StartAnswer(attempt_id, True, attempt.execution_number)
            return StartAnswer(attempt_id, False, reason="attempt already ended")
        if job is None:
            return StartAnswer(attempt_id, False, reason="superseded attempt")
        decision = decide_start(job, attempt_id, self.now)
        if not decision.granted:
            return StartAnswer(attempt_id, False, reason=decision.reason)
        self._keep(self.writes.start(job, attempt_id, decision.execution_number))
        self._starts.append((job.queue, key_of(job), self.now))
        self.answers.started.append(RunStarted(job.queue, job.wire_name, max(self.now - job.run_at_ms, 0)))
        self._attempts[attempt_id] = evolve(
            attempt, started_at_ms=self.now, execution_number=decision.execution_number
        )
        return StartAnswer(attempt_id, True, decision.execution_number)

    def _result(self, result: ResultReport) -> ResultAnswer:
        attempt_id = result.attempt_id
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            return _refused(attempt_id, _unknown_attempt("result.attempt_id", attempt_id))
        job = self._current(attempt_id)
        refusal = self._result_refusal(result, attempt, job)
        if refusal is not None:
            return refusal
        assert job is not None  # a result for no running job was refused above
        report = _without_nul(result.report)
        bounds = self.tx.bounds
        decision = decide_result(
            job,
            report,
            self.now,
            bounds.max_failure_detail_bytes,
            self.ops.rng,
            max_message_bytes=bounds.max_failure_message_bytes,
        )
        output = result.output if decision.job_state is JobState.SUCCEEDED else None
        ran_ms = None if attempt.started_at_ms is None else max(self.now - attempt.started_at_ms, 0)
        self._keep(
            self.writes.end_attempt(job, decision, reported=True, output=output, report=report, ran_ms=ran_ms)
        )
        # A repeat of this result later in the same batch must see it.
        self._attempts[attempt_id] = evolve(
            attempt,
            outcome=decision.attempt_outcome,
            retry_delay_ms=decision.retry_delay_ms,
            job_state_after=decision.job_state,
            reported=True,
        )
        return ResultAnswer(attempt_id, True, decision.job_state, decision.retry_delay_ms)

    def _result_refusal(
        self, result: ResultReport, attempt: AttemptRecord, job: JobRecord | None
    ) -> ResultAnswer | None:
        """The answer to a result that changes nothing: not the sender's attempt, a
        repeat (R-14), a stale one (R-11), one never started, an output over its bound;
        None for a result to decide."""
        attempt_id = attempt.id
        if not self._held(attempt, result.sender):
            return _refused(
                attempt_id,
                PermissionDenied(
                    f"attempt {attempt_id} is held by another worker stream; only the worker "
                    "and token that claimed it may report its result",
                    reason="ATTEMPT_NOT_HELD",
                    metadata={"attempt_id": attempt_id},
                ),
            )
        if attempt.outcome is not None:
            # a repeat gets the first answer and changes nothing. A release is
            # reported too, but it was no result: a result after it is stale.
            if attempt.reported and attempt.outcome is not Outcome.RELEASED:
                return ResultAnswer(attempt_id, True, attempt.job_state_after, attempt.retry_delay_ms)
            return ResultAnswer(attempt_id, False, reason=f"attempt already ended {attempt.outcome.value}")
        if job is not None and job.state is JobState.RESERVED and attempt.started_at_ms is None:
            # Not superseded: still the job's current claim, but its handler was never
            # authorized. Nothing changes; the claim waits for its start or its lease.
            return _refused(
                attempt_id,
                FailedPrecondition(
                    f"attempt {attempt_id} was never started: send a StartRequest and report a "
                    "result only after the start is granted (the claim stays reserved until then "
                    "or until its lease lapses)",
                    reason="ATTEMPT_NOT_STARTED",
                    metadata={"attempt_id": attempt_id},
                ),
            )
        if job is None or job.state is not JobState.RUNNING:
            return ResultAnswer(attempt_id, False, reason="superseded attempt")
        limit, output = self.tx.bounds.max_output_bytes, result.output
        if result.report.outcome is Outcome.SUCCEEDED and output is not None and len(output) > limit:
            # docs/limits.md: rejected before anything is written; the worker then reports
            # output_too_large as a permanent failure.
            return _refused(attempt_id, JobOutputTooLarge(job.id, len(output), limit))
        return None

    def _claim(self, requests: Sequence[ClaimRequest]) -> None:
        """Claims, for each request, the jobs the store chooses (``Tx.claim``, R-17), and
        answers it with them and whether its queues are drained (``BatchAnswers.drained``)."""
        wanted = [ClaimWanted(r.queues, r.wire_names, r.count) for r in requests]
        # Claimable means due by the time read before the claim; the claims are stamped
        # (and their leases counted) from a time read after its locks and counts, so a
        # job is never claimed before it was due, nor before an end the counts saw.
        chosen = self.tx.claim(wanted, self.now)
        self._tick()
        for request, found in zip(requests, chosen, strict=True):
            lease_until = self.now + request.lease_ms
            claimed = []
            for job in found.jobs:
                attempt_id = uuid7(self.now)
                updated, made = self.writes.claim(
                    job, attempt_id, request.worker_id, lease_until, request.token_id
                )
                self._made.append(made)
                claimed.append(Claimed(self._keep(updated), attempt_id, lease_until))
            outputs = self.tx.parent_outputs(item.job.id for item in claimed) if claimed else {}
            if outputs:
                claimed = [_with_outputs(item, outputs.get(item.job.id, {}), request) for item in claimed]
            self.answers.claims.append(claimed)
            self.answers.drained.append(found.drained)
            if found.wake_at_ms is not None:  # a rate held jobs back: claim again then
                self.answers.scheduled(found.wake_at_ms)

    def _join_starts(self, joining: StartJoin) -> None:
        """Hands the claims to their workers before the commit and writes the starts they
        answer with in time, as any start (``dispatch.joined_starts``). A second try
        hands nothing out, and refuses the starts the first one took: their attempts
        were never committed."""
        claims = self.answers.claims
        self.answers.handed_out_early = any(claims) and joining.hand_out(claims)
        self.writes.flush()
        if self.answers.handed_out_early:
            # The claims' rows go out while their workers answer. Held to the start's
            # write, they went out just before it (one statement cannot update a row
            # twice): a round trip more between the last start and the commit. On
            # PostgreSQL, p50 enqueue-to-start 4.50 against 4.83 and 4.96 against 5.43
            # ms (two sittings of 8 alternating pairs, 300 jobs at 100/s each).
            self.tx.send_writes()
        starts = joining.gather()
        if not starts:
            return
        for made in self._made:  # the attempts as this try's claims made them
            self._attempts[made.id] = made.record()
        self._tick()  # a start is stamped when it is written, after the wait
        self.answers.joined_starts = [self._start(start) for start in starts]
        self._count_starts()


def _with_outputs(claimed: Claimed, outputs: Mapping[str, ParentOutput], request: ClaimRequest) -> Claimed:
    """``claimed`` with its parents' outputs, but only those of parents in queues the
    claiming token may serve: a child named across the tenancy boundary (by a token that
    may reach the parent's queue) must not carry another tenant's output to this worker.
    The job still runs; its handler finds that parent missing from its parent outputs."""
    kept: dict[str, bytes] = {}
    traces: dict[str, tuple[str, str | None]] = {}
    for parent_id, parent in outputs.items():
        if may_serve(request.token_queues, parent.queue):
            kept[parent_id] = parent.output
            if parent.traceparent is not None:
                traces[parent_id] = (parent.traceparent, parent.tracestate)
        else:
            log.warning(
                "withheld the output of parent %s (queue %s) from job %s: the claiming token "
                "(%s) may not serve that queue",
                parent_id,
                parent.queue or "unknown",
                claimed.job.id,
                request.token_id,
            )
    return evolve(claimed, parent_outputs=kept, parent_trace_contexts=traces)


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
    return report._replace(
        exception_type=report.exception_type.replace("\x00", "\ufffd"),
        message=report.message.replace("\x00", "\ufffd"),
        detail=report.detail.replace("\x00", "\ufffd"),
    )
