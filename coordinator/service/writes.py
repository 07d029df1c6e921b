"""The writes of one transaction over jobs and attempts, and the one terminal path.

``JobWrites`` keeps the freshest copy of each job it touched (several messages about
one job in a batch see each other's effect), gathers the writes and sends them as few
statements as possible at ``flush()``, and records the effects the facade hands on
after the commit. Every way a job ends (a result, a cancel, a lapsed lease, unstarted
exhaustion, a parent's failure) goes through ``end_job``: that is where waiters,
metrics and dependent jobs hear of it — at the flush, a success releases the children it
was the last parent of and a failure or cancel fails the waiting descendants (R-15), in
the same transaction, batched over every job the transaction ended.
"""

from __future__ import annotations

from coordinator.domain import changes
from coordinator.domain.changes import JobChange
from coordinator.domain.dependencies import released_state
from coordinator.domain.lifecycle import Decision, Report
from coordinator.domain.records import AttemptEnd, JobRecord, NewAttempt
from coordinator.domain.states import CODE_PARENT_FAILED, JobState, Outcome
from coordinator.service.effects import AttemptEnded, Effects
from coordinator.store import Tx

_set_field = object.__setattr__
"""A frozen record's field set past its guard: only on a record no one else holds yet."""


class JobWrites:
    def __init__(self, tx: Tx, now_ms: int, effects: Effects | None = None) -> None:
        self.tx = tx
        self.now = now_ms
        self.effects = effects if effects is not None else Effects()
        self._changes: list[JobChange] = []
        self._new_attempts: list[NewAttempt] = []
        self._started: list[tuple[str, int]] = []
        self._ends: list[AttemptEnd] = []
        self._notified = False
        self._fresh: dict[str, JobRecord] = {}
        """Jobs as this transaction will leave them (read back before the flush)."""
        self._ended: dict[str, JobRecord] = {}
        """Jobs ended since the last flush whose waiting children are still to settle."""

    def flush(self) -> None:
        """Settles the dependents of the jobs that ended, then sends the gathered writes:
        job updates first (attempt rows refer to them)."""
        self._settle_dependents()
        self.tx.apply(self._changes, self.now)
        self.tx.insert_attempts(self._new_attempts)
        self.tx.mark_started(self._started, self.now)
        self.tx.finish_attempts(self._ends)
        self._changes, self._new_attempts, self._started, self._ends = [], [], [], []
        if self.effects.available_changed and not self._notified:
            # Other replicas hear it at commit; once per transaction is enough.
            self.tx.notify_jobs_available()
            self._notified = True

    def change(
        self, job: JobRecord, after: JobRecord, reason: str | None, attempt_id: str | None
    ) -> JobRecord:
        """Gathers one guarded write (checked against the transition table) and returns
        the job as it will be once written: ``after`` itself, stamped.

        ``after`` must be a record built for this write (by ``domain.changes``) and
        held by no one else: it gets its history sequence and update time in place, as a
        draft would, instead of through a second copy of all its fields (one of the
        writer's largest costs per job)."""
        if after is job:
            raise changes.IllegalTransition(f"job {job.id}: a change needs a new record, not the one read")
        self._changes.append(JobChange(job, after, reason, attempt_id))
        _set_field(after, "history_seq", job.history_seq + 1)
        _set_field(after, "updated_at_ms", self.now)
        self._fresh[job.id] = after
        return after

    def fresh(self, job: JobRecord) -> JobRecord:
        """``job`` as read from the store, or as this transaction already changed it."""
        return self._fresh.get(job.id, job)

    def end_job(
        self,
        job: JobRecord,
        after: JobRecord,
        *,
        reason: str | None,
        attempt_id: str | None = None,
        attempt_end: AttemptEnd | None = None,
    ) -> JobRecord:
        """THE terminal path: writes a job's end (and its attempt's, if one ends with it)
        and records it for waiters and metrics."""
        if not after.state.terminal:
            raise changes.IllegalTransition(f"end_job with a non-terminal state {after.state.value}")
        updated = self.change(job, after, reason, attempt_id)
        if attempt_end is not None:
            self._ends.append(attempt_end)
        self.effects.job_finished(job.id, job.queue, job.wire_name, after.state)
        self._ended[job.id] = updated  # its waiting children settle at the flush
        return updated

    def _settle_dependents(self) -> None:
        """R-15/R-16 for every job ended since the last flush, a few statements per round
        whatever their number: a success copies its output to its children and releases
        those it was the last parent of; a failure or cancel ends its waiting children
        ``parent_failed`` (``end_job`` again), and theirs in the next round."""
        while self._ended:
            ended, self._ended = self._ended, {}
            # The parents first: the parent rows are locked (this transaction ended them),
            # so no child of theirs can be added meanwhile, and most ends have none.
            parents = self.tx.parents_with_children(ended)
            if not parents:
                continue
            children = self.tx.waiting_children(parents)
            self.tx.satisfy_dependencies(
                {
                    job_id: ended[job_id].output
                    for job_id in parents
                    if ended[job_id].state is JobState.SUCCEEDED
                }
            )
            candidates: dict[str, JobRecord] = {}
            for parent_id, stored in children.items():
                succeeded = ended[parent_id].state is JobState.SUCCEEDED
                for child in map(self.fresh, stored):
                    if child.state is not JobState.WAITING:
                        continue  # ended or released already, through another parent
                    if succeeded:
                        candidates[child.id] = child
                    else:
                        self.end_job(child, changes.parent_failed(child, self.now), reason=CODE_PARENT_FAILED)
            pending = self.tx.unsatisfied_parents(candidates) if candidates else {}
            for child in map(self.fresh, candidates.values()):
                if child.state is JobState.WAITING and not pending.get(child.id):
                    self._release(child)

    def _release(self, child: JobRecord) -> None:
        state = released_state(child.run_at_ms, self.now)
        self.change(child, changes.released(child, state), "parents_succeeded", None)
        if state is JobState.SCHEDULED:
            self.effects.scheduled(child.run_at_ms)
        else:
            self.effects.available_changed = True

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
    ) -> JobRecord:
        """Writes an attempt's end and the job's next state from one decision."""
        attempt_id = job.current_attempt_id
        assert attempt_id is not None
        after = changes.attempt_ended(job, decision, self.now, output)
        end = AttemptEnd(
            attempt_id=attempt_id,
            finished_at_ms=self.now,
            outcome=decision.attempt_outcome,
            job_state_after=decision.job_state,
            reported=reported,
            error_code=decision.error_code,
            exception_type=(report.exception_type or None) if report else None,
            message=decision.message or None,
            detail=decision.detail or None,
            retry_delay_ms=decision.retry_delay_ms,
        )
        reason = decision.job_error_code or decision.error_code or decision.attempt_outcome.value
        if decision.job_state.terminal:
            updated = self.end_job(job, after, reason=reason, attempt_id=attempt_id, attempt_end=end)
        else:
            updated = self.change(job, after, reason, attempt_id)
            self._ends.append(end)
        effects = self.effects
        if decision.attempt_outcome is Outcome.RELEASED or decision.job_state is JobState.AVAILABLE:
            effects.available_changed = True
        effects.ended.append(
            AttemptEnded(
                job.queue, job.wire_name, decision.attempt_outcome, decision.job_state, ran_ms, lease_lapsed
            )
        )
        if decision.job_state is JobState.SCHEDULED and decision.run_at_ms is not None:
            effects.scheduled(decision.run_at_ms)
        return updated

    def claim(
        self, job: JobRecord, attempt_id: str, worker_id: str, lease_until_ms: int, token_id: str | None
    ) -> tuple[JobRecord, NewAttempt]:
        """Claims ``job`` for ``worker_id``: the job as claimed, and the attempt made for
        it (its row goes out at ``flush``)."""
        updated = self.change(
            job, changes.claimed(job, attempt_id, worker_id, lease_until_ms), changes.CLAIMED, attempt_id
        )
        made = NewAttempt(attempt_id, job.id, job.generation, worker_id, self.now, token_id=token_id)
        self._new_attempts.append(made)
        self.effects.leases_taken = True
        return updated, made

    def start(self, job: JobRecord, attempt_id: str, execution_number: int) -> JobRecord:
        self._started.append((attempt_id, execution_number))
        return self.change(job, changes.started(job, execution_number), changes.STARTED, attempt_id)
