"""The job lifecycle as a state machine (hypothesis.stateful) against the real store, on
SQLite and PostgreSQL.

Two workers, each with its own token, claim, start, heartbeat, report, release and
crash, one message at a time or several in one batch (as the dispatcher writes them);
the clock moves and leases expire; an operator cancels and retries; and forged messages
(another stream naming a worker's attempts) arrive. A small model, written
from the rules (R-1, R-2, R-4, R-5, R-8 to R-12, R-14) rather than from the domain
code, says what each step must do; after every step the store must agree with it, and
must hold what is true whatever happened:

- every job is in one of the states, and its history is a chain of transitions that
  ``TRANSITIONS`` allows, only ever appended to;
- executions equal the started attempts of the current generation, never more than
  ``max_executions``; at most one attempt succeeds per generation, and a succeeded
  job's output is the one its holder sent;
- a job has a current attempt (open, held by a worker, with a lease) exactly while it
  is reserved or running;
- forged messages, superseded (or repeated) results and anything done to a job that
  ended change nothing; only a manual retry takes a job out of a terminal state.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import create_engine, delete
from sqlalchemy.pool import NullPool

from coordinator.domain.access import Actor, Principal, Scope
from coordinator.domain.clock import FakeClock
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import AttemptRecord, JobRecord, NewJobSpec, Transition, WorkerIdentity
from coordinator.domain.settings import JobSettings, SettingsLayer
from coordinator.domain.states import TRANSITIONS, JobState, Outcome
from coordinator.errors import FailedPrecondition
from coordinator.scheduler.due import promote_due
from coordinator.scheduler.leases import expire_leases
from coordinator.service.manage import ManagementService
from coordinator.service.work import (
    AttemptMessage,
    Claimed,
    ClaimRequest,
    HeartbeatAnswer,
    HeartbeatRequest,
    ResultAnswer,
    ResultReport,
    StartAnswer,
    WorkBatch,
)
from coordinator.store.schema import attempts, jobs, transitions

from .harness import QUEUE, WIRE, Harness, r2_range

# Modest by default (the machine runs on both engines in every suite run); raise it to
# explore further: RUNWICK_LIFECYCLE_EXAMPLES=500 tests/run.sh tests/contract -k machine
MACHINE_SETTINGS = settings(
    max_examples=int(os.environ.get("RUNWICK_LIFECYCLE_EXAMPLES", "15")),
    stateful_step_count=int(os.environ.get("RUNWICK_LIFECYCLE_STEPS", "25")),
    deadline=None,
    derandomize=os.environ.get("RUNWICK_LIFECYCLE_RANDOM") is None,
    database=None,
    # No "explain" phase: it traces every line run, far too slow through SQLAlchemy.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)

WORKERS = (WorkerIdentity("worker-a", "aaaaaaaaaaaaaaaa"), WorkerIdentity("worker-b", "bbbbbbbbbbbbbbbb"))
WORKER = st.sampled_from(range(len(WORKERS)))
AIM = st.sampled_from(["ready", "ready", "remembered", "any"])
"""Which attempt a worker's message names (``pick_attempt``)."""
ACTIONS = st.sampled_from(
    [
        *("claim", "start", "result") * 3,
        *("heartbeat", "release", "crash", "forge", "batch", "batch"),
        *("time_passes",) * 3,
        *("enqueue", "cancel", "manual_retry"),
    ]
)
"""What can happen in one step, weighted towards what moves jobs on."""
BATCHED = ["claim", "start", "start", "result", "result", "heartbeat", "release"]
"""The messages a batch is made of."""
OPERATOR = Actor(Principal("0123456789abcdef", "ops", frozenset({Scope.MANAGE})), "ipv4:127.0.0.1:1")
MAX_JOBS = 5
LEASE_AS_STORED = -1
"""A model lease the store decides (it is read back at the next check)."""
LEASES_MS = st.sampled_from([1_000, 5_000, 60_000])
ADVANCES_MS = st.sampled_from([1, 400, 1_000, 2_500, 10_000, 61_000])
LEASED = frozenset({JobState.RESERVED, JobState.RUNNING})
CLAIMABLE = frozenset({JobState.AVAILABLE, JobState.SCHEDULED})
RETRIED = frozenset({Outcome.RETRYABLE_FAILURE, Outcome.TIMED_OUT, Outcome.INTERRUPTED, Outcome.ABANDONED})
WORKER_OUTCOMES = [  # success twice: most runs that end, end well
    Outcome.SUCCEEDED,
    Outcome.SUCCEEDED,
    Outcome.RETRYABLE_FAILURE,
    Outcome.PERMANENT_FAILURE,
    Outcome.TIMED_OUT,
    Outcome.CANCELLED,
    Outcome.INTERRUPTED,
]
# The code each outcome gets when the worker sends none.
DEFAULT_CODE = {
    Outcome.RETRYABLE_FAILURE: "error",
    Outcome.PERMANENT_FAILURE: "permanent_failure",
    Outcome.TIMED_OUT: "timeout",
    Outcome.CANCELLED: "cancelled",
    Outcome.INTERRUPTED: "worker_shutdown",
    Outcome.ABANDONED: "lease_expired",
}


@st.composite
def job_settings(draw: st.DrawFn) -> SettingsLayer:
    retry_initial = draw(st.sampled_from([1, 400, 2_000]))
    unstarted_initial = draw(st.sampled_from([1, 1_000]))
    return SettingsLayer(
        max_executions=draw(st.integers(1, 3)),
        retry_initial_delay_ms=retry_initial,
        retry_max_delay_ms=retry_initial * draw(st.sampled_from([1, 2, 8])),
        max_unstarted_abandonments=draw(st.integers(1, 3)),
        unstarted_initial_delay_ms=unstarted_initial,
        unstarted_max_delay_ms=unstarted_initial * draw(st.sampled_from([1, 4])),
    )


def impostors(holder: WorkerIdentity) -> list[WorkerIdentity]:
    """Streams that are not ``holder``: the other worker, and near misses of it."""
    other = next(w for w in WORKERS if w != holder)
    return [
        other,
        WorkerIdentity(holder.worker_id, other.token_id),
        WorkerIdentity(holder.worker_id, None),
        WorkerIdentity(other.worker_id, holder.token_id),
        WorkerIdentity(holder.worker_id, holder.token_id, frozenset({"elsewhere"})),
    ]


# -- the model --------------------------------------------------------------------------


@dataclass
class ModelAttempt:
    id: str
    job_id: str
    generation: int
    worker: int
    claimed_at: int
    started_at: int | None = None
    execution_number: int = 0
    outcome: Outcome | None = None
    reported: bool = False
    error_code: str | None = None
    retry_delay: int | None = None
    state_after: JobState | None = None
    finished_at: int | None = None
    output: bytes | None = None
    """What the holder sent with the success the store accepted."""


@dataclass
class ModelJob:
    id: str
    priority: int
    settings: JobSettings
    state: JobState
    run_at: int
    generation: int = 1
    executions: int = 0
    streak: int = 0
    current: str | None = None
    holder: int | None = None
    lease_until: int | None = None
    lease_floor: int | None = None
    """The lease before a start (``LEASE_AS_STORED``), which it must not shorten."""
    cancel_requested: bool = False
    finished_at: int | None = None
    last_error_code: str | None = None
    output: bytes | None = None
    history: list[tuple[JobState | None, JobState, str | None]] = field(default_factory=list)
    """(from, to, attempt) of every transition, the first from None."""

    def move(self, to: JobState, attempt_id: str | None = None) -> None:
        self.history.append((self.state, to, attempt_id))
        self.state = to


@dataclass(frozen=True)
class Seen:
    """What the store holds about one job."""

    job: JobRecord
    attempts: dict[str, AttemptRecord]
    transitions: list[Transition]


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self, harness: Harness, clear: Callable[[], None]) -> None:
        super().__init__()
        # Every example replays alike (hypothesis shrinks by replaying): its own clock
        # and seeded random source, job IDs in creation order (each enqueue takes 1 ms,
        # and IDs are time-ordered), and choices drawn from lists in creation order.
        harness = Harness.build(harness.store, FakeClock(), harness.config)
        self.h = harness
        self.clear = clear
        self.manage = ManagementService(harness.store, harness.clock)
        self.jobs: dict[str, ModelJob] = {}
        self.attempts: dict[str, ModelAttempt] = {}
        self.memory: list[list[str]] = [[] for _ in WORKERS]
        """The attempts each worker knows it holds (a crash forgets them)."""
        self.world: dict[str, Seen] = {}
        """The store as the last check saw it."""
        self.delays: dict[str, int | None] = {}
        """The retry delays the store chose in this step (R-2 jitter is random)."""
        self.keys: dict[str, str] = {}
        """Idempotency keys and the jobs they made."""
        self.expect_unchanged = False
        self.retried: str | None = None

    def teardown(self) -> None:
        self.clear()

    # -- helpers ----------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.h.clock.now_ms()

    def read(self) -> dict[str, Seen]:
        store = self.h.store
        records = store.get_jobs(list(self.jobs))
        return {
            job_id: Seen(
                records[job_id],
                {a.id: a for a in store.list_attempts(job_id)},
                store.list_transitions(job_id),
            )
            for job_id in self.jobs
        }

    def stored_delay(self, attempt_id: str) -> int | None:
        if attempt_id not in self.delays:
            for attempt in self.h.attempts(self.attempts[attempt_id].job_id):
                self.delays[attempt.id] = attempt.retry_delay_ms
        return self.delays[attempt_id]

    def unchanged(self) -> None:
        """This step must leave the store exactly as it was."""
        self.expect_unchanged = True

    def settle(self, changed: bool) -> None:
        if not changed:
            self.unchanged()

    def end(
        self,
        attempt: ModelAttempt,
        outcome: Outcome,
        to: JobState,
        *,
        reported: bool,
        code: str | None,
        job_code: str | None = None,
        delay: int | None = None,
        streak: int = 0,
        output: bytes | None = None,
    ) -> None:
        """An attempt ends and its job moves on (the one way every attempt ends)."""
        job, now = self.jobs[attempt.job_id], self.now
        assert job.current == attempt.id
        attempt.outcome, attempt.reported, attempt.error_code = outcome, reported, code
        attempt.retry_delay, attempt.state_after, attempt.finished_at = delay, to, now
        job.move(to, attempt.id)
        job.current = job.holder = job.lease_until = None
        job.streak = streak
        if (job_code or code) is not None:
            job.last_error_code = job_code or code
        if delay is not None:
            job.run_at = now + delay
        if to.terminal:
            job.finished_at = now
        if output is not None:
            job.output = output

    def after_run(
        self,
        attempt: ModelAttempt,
        outcome: Outcome,
        code: str,
        *,
        reported: bool,
        explicit: int | None = None,
    ) -> None:
        """R-5/R-6/R-8: how a started run's end moves its job."""
        job = self.jobs[attempt.job_id]
        if outcome is Outcome.SUCCEEDED:
            self.end(
                attempt, outcome, JobState.SUCCEEDED, reported=reported, code=None, output=attempt.output
            )
        elif outcome is Outcome.CANCELLED:
            self.end(attempt, outcome, JobState.CANCELLED, reported=reported, code=code)
        elif job.cancel_requested:  # however it ended, a cancelled run is not retried
            self.end(attempt, outcome, JobState.CANCELLED, reported=reported, code=code, job_code="cancelled")
        elif outcome in RETRIED and explicit is not None and explicit < 0:  # a contract fault
            self.end(
                attempt,
                Outcome.PERMANENT_FAILURE,
                JobState.FAILED,
                reported=reported,
                code="negative_retry_delay",
            )
        elif outcome in RETRIED and job.executions < job.settings.max_executions:
            delay = self.stored_delay(attempt.id)
            assert delay is not None
            if explicit is not None:
                assert delay == min(explicit, job.settings.retry_max_delay_ms)
            else:  # equal jitter around the run's nominal delay
                low, high = r2_range(
                    job.executions, job.settings.retry_initial_delay_ms, job.settings.retry_max_delay_ms
                )
                assert low <= delay <= high, (delay, low, high)
            self.end(attempt, outcome, JobState.SCHEDULED, reported=reported, code=code, delay=delay)
        else:  # the last allowed execution, or a permanent failure
            self.end(attempt, outcome, JobState.FAILED, reported=reported, code=code)

    def pick_attempt(self, data: st.DataObject, ready: JobState) -> tuple[str, int]:
        """An attempt and the worker that claimed it: mostly one a worker holds whose
        job is ``ready`` (reserved to start or release, running to report); else one a
        worker remembers (its lease may have lapsed meanwhile), or any attempt ever
        claimed (a late message)."""
        aim = data.draw(AIM, label="aim")
        remembered = [(a, w) for w, memory in enumerate(self.memory) for a in memory]
        held = [
            (a, w)
            for a, w in remembered
            if self.jobs[self.attempts[a].job_id].current == a
            and self.jobs[self.attempts[a].job_id].state is ready
        ]
        if aim == "ready" and held:
            pool = held
        elif aim != "any" and remembered:
            pool = remembered
        else:
            pool = [(a.id, a.worker) for a in self.attempts.values()]
        return data.draw(st.sampled_from(pool), label="attempt")

    # -- the rule ---------------------------------------------------------------------

    @initialize(layers=st.lists(job_settings(), min_size=1, max_size=3), kept=st.sampled_from([100, 100, 3]))
    def first_jobs(self, layers: list[SettingsLayer], kept: int) -> None:
        """Some jobs to start with; and sometimes a store that keeps only the newest
        three transitions of each job (``max_history_per_job``), so older ones go."""
        if kept != self.h.store.bounds.max_history_per_job:
            self.h = self.h.with_bounds(max_history_per_job=kept)
            self.manage = ManagementService(self.h.store, self.h.clock)
        for layer in layers:
            self.add_job(layer, priority=0, run_at_offset=None)

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One thing happens, drawn from ``ACTIONS`` (each a method below).

        One rule with weighted actions rather than a rule per action: hypothesis turns
        rules off at random per example (swarm testing) and leans on the first rule, so
        in a short run most examples would only cancel, or only let time pass. Weights
        keep every example moving jobs through their whole lifecycle."""
        action = data.draw(ACTIONS, label="action")
        if action in {"start", "result", "release", "forge", "batch"} and not self.attempts:
            action = "claim"
        if action == "enqueue" and len(self.jobs) >= MAX_JOBS:
            action = "time_passes"
        getattr(self, action)(data)

    # -- enqueue and the worker protocol ----------------------------------------------

    def enqueue(self, data: st.DataObject) -> None:
        self.add_job(
            data.draw(job_settings(), label="settings"),
            data.draw(st.integers(0, 2), label="priority"),
            data.draw(st.sampled_from([None, -1_000, 0, 1_500]), label="run_at offset"),
            data.draw(st.sampled_from([None, None, "key-1", "key-2"]), label="idempotency key"),
        )

    def add_job(
        self, layer: SettingsLayer, priority: int, run_at_offset: int | None, key: str | None = None
    ) -> None:
        now = self.h.clock.advance(1)
        run_at = None if run_at_offset is None else now + run_at_offset
        [enqueued] = self.h.enqueue_specs(
            [
                NewJobSpec(
                    WIRE, b"{}", priority=priority, run_at_ms=run_at, idempotency_key=key, settings=layer
                )
            ]
        )
        if key in self.keys:  # the job that key made, as it is now; nothing new
            assert (enqueued.existing, enqueued.job_id) == (True, self.keys[key])
            assert enqueued.state is self.jobs[enqueued.job_id].state
            self.unchanged()
            return
        assert not enqueued.existing
        if key is not None:
            self.keys[key] = enqueued.job_id
        settings = self.h.job(enqueued.job_id).settings
        assert settings == JobSettings(  # the job's own settings, copied onto it
            max_executions=layer.max_executions or 0,
            retry_initial_delay_ms=layer.retry_initial_delay_ms or 0,
            retry_max_delay_ms=layer.retry_max_delay_ms or 0,
            max_unstarted_abandonments=layer.max_unstarted_abandonments or 0,
            unstarted_initial_delay_ms=layer.unstarted_initial_delay_ms or 0,
            unstarted_max_delay_ms=layer.unstarted_max_delay_ms or 0,
        )
        run_at = now if run_at is None else run_at
        state = JobState.SCHEDULED if run_at > now else JobState.AVAILABLE
        job = ModelJob(enqueued.job_id, priority, settings, state, run_at)
        job.history.append((None, state, None))
        self.jobs[job.id] = job

    # Each message of the protocol has a send (what the worker puts in a batch) and an
    # expect (what the model says its answer and its effect must be). One batch is
    # carried out as releases, starts, heartbeats, results, then claims; the heartbeats
    # renew leases as the batch found them (before its releases), and the others see
    # the effect of those before them. Each expect returns whether the store changes.

    def claim(self, data: st.DataObject) -> None:
        request = self.claim_request(data)
        [claimed] = self.h.ops.process(WorkBatch(claims=[request])).claims
        self.settle(self.expect_claim(request, claimed))

    def claim_request(self, data: st.DataObject) -> ClaimRequest:
        worker = WORKERS[data.draw(WORKER, label="worker")]
        count = data.draw(st.integers(1, 3), label="count")
        lease_ms = data.draw(LEASES_MS, label="lease")
        return ClaimRequest(worker.worker_id, (QUEUE,), (WIRE,), count, lease_ms, worker.token_id)

    def expect_claim(self, request: ClaimRequest, claimed: list[Claimed]) -> bool:
        """Claims take due jobs by priority, then run-at, then ID (scheduled ones too)."""
        now = self.now
        worker = next(i for i, w in enumerate(WORKERS) if w.worker_id == request.worker_id)
        due = [j for j in self.jobs.values() if j.state in CLAIMABLE and j.run_at <= now]
        expected = sorted(due, key=lambda j: (-j.priority, j.run_at, j.id))[: request.count]
        assert [c.job.id for c in claimed] == [j.id for j in expected]
        for c in claimed:
            assert c.lease_expires_at_ms == now + request.lease_ms
            job = self.jobs[c.job.id]
            job.move(JobState.RESERVED, c.attempt_id)
            job.current, job.holder, job.lease_until = c.attempt_id, worker, now + request.lease_ms
            self.attempts[c.attempt_id] = ModelAttempt(c.attempt_id, job.id, job.generation, worker, now)
            self.memory[worker].append(c.attempt_id)
        return bool(claimed)

    def start(self, data: st.DataObject) -> None:
        attempt_id, worker = self.pick_attempt(data, JobState.RESERVED)
        [answer] = self.h.ops.process(WorkBatch(starts=[AttemptMessage(attempt_id, WORKERS[worker])])).starts
        self.settle(self.expect_start(attempt_id, answer))

    def expect_start(self, attempt_id: str, answer: StartAnswer, lease: int | None = None) -> bool:
        """``lease``: the job's lease when the batch began (default: as the model has it)."""
        attempt = self.attempts[attempt_id]
        job = self.jobs[attempt.job_id]
        lease = job.lease_until if lease is None else lease
        if attempt.started_at is not None:  # a repeat, answered while it still runs
            assert answer.granted == (job.current == attempt_id and job.state is JobState.RUNNING), answer
            if answer.granted:
                assert answer.execution_number == attempt.execution_number
            return False
        if job.current != attempt_id or job.executions >= job.settings.max_executions:
            assert not answer.granted, answer
            return False
        assert job.state is JobState.RESERVED
        lapsed = lease is not None and lease <= self.now
        if lapsed and not answer.granted:
            return False  # R-4 allows refusing a claim whose lease lapsed (expiry has not run)
        assert (answer.granted, answer.execution_number) == (True, job.executions + 1), answer
        job.executions += 1
        job.streak = 0
        job.move(JobState.RUNNING, attempt_id)
        attempt.started_at, attempt.execution_number = self.now, job.executions
        # A start may keep the lease or renew it (today it keeps it, even a lapsed one:
        # see test_late_start.py), never shorten it: read it back at the next check.
        job.lease_floor, job.lease_until = job.lease_until, LEASE_AS_STORED
        return True

    def heartbeat(self, data: st.DataObject) -> None:
        request = self.heartbeat_request(data)
        [answer] = self.h.ops.process(WorkBatch(heartbeats=[request])).heartbeats
        self.settle(self.expect_heartbeat(request, answer))

    def heartbeat_request(self, data: st.DataObject) -> HeartbeatRequest:
        """One heartbeat names every attempt the worker remembers."""
        worker = data.draw(WORKER, label="worker")
        lease_ms = data.draw(LEASES_MS, label="lease")
        return HeartbeatRequest(list(self.memory[worker]), lease_ms, WORKERS[worker])

    def expect_heartbeat(self, request: HeartbeatRequest, answer: HeartbeatAnswer) -> bool:
        """R-10: the sender's current attempts whose lease has not lapsed are renewed,
        the rest reported lost (and the worker forgets those). Lapsed is lost even before
        expiry has run."""
        sent = request.attempt_ids
        renewed = {a for a in sent if self.renewable(self.jobs[self.attempts[a].job_id], a)}
        assert answer.lost == set(sent) - renewed
        assert answer.cancels == {a for a in renewed if self.jobs[self.attempts[a].job_id].cancel_requested}
        for attempt_id in renewed:
            self.jobs[self.attempts[attempt_id].job_id].lease_until = self.now + request.lease_ms
        worker = WORKERS.index(request.sender)
        self.memory[worker] = [a for a in self.memory[worker] if a not in answer.lost]
        return bool(renewed)

    def renewable(self, job: ModelJob, attempt_id: str) -> bool:
        assert job.lease_until != LEASE_AS_STORED, "read back at every check"
        return job.current == attempt_id and job.lease_until is not None and job.lease_until > self.now

    def result(self, data: st.DataObject) -> None:
        report = self.result_report(data)
        [answer] = self.h.ops.process(WorkBatch(results=[report])).results
        self.settle(self.expect_result(report, answer))

    def result_report(self, data: st.DataObject) -> ResultReport:
        """A result, with the output ``<worker ID>:<attempt ID>`` (kept only on success)
        and perhaps a middleware's explicit retry delay (R-6)."""
        attempt_id, worker = self.pick_attempt(data, JobState.RUNNING)
        outcome = data.draw(st.sampled_from(WORKER_OUTCOMES), label="outcome")
        code = data.draw(st.sampled_from(["", "boom"]), label="code")
        explicit = data.draw(st.sampled_from([None, None, -1, 0, 700, 100_000]), label="explicit delay")
        sender = WORKERS[worker]
        report = Report(outcome, error_code=code, explicit_retry_delay_ms=explicit)
        return ResultReport(attempt_id, report, f"{sender.worker_id}:{attempt_id}".encode(), sender)

    def expect_result(self, result: ResultReport, answer: ResultAnswer) -> bool:
        attempt = self.attempts[result.attempt_id]
        job = self.jobs[attempt.job_id]
        if attempt.outcome is not None:
            # a repeat of an accepted result gets its answer; after anything else
            # (an expiry, a release, a cancel) it is stale. Either way: no change.
            repeat = attempt.reported and attempt.outcome is not Outcome.RELEASED
            assert answer.accepted == repeat, answer
            if repeat:
                assert (answer.job_state, answer.retry_delay_ms) == (attempt.state_after, attempt.retry_delay)
            else:
                assert answer.error is None, answer  # stale, not refused
            return False
        if job.current == attempt.id and job.state is JobState.RESERVED and attempt.started_at is None:
            # Not superseded: never started. Refused for that, and nothing changes.
            assert not answer.accepted and answer.error is not None, answer
            assert answer.error.reason == "ATTEMPT_NOT_STARTED", answer
            return False
        if job.current != attempt.id or job.state is not JobState.RUNNING:
            assert (answer.accepted, answer.error) == (False, None), answer  # superseded
            return False
        assert answer.accepted, answer
        outcome = result.report.outcome
        if outcome is Outcome.SUCCEEDED:
            attempt.output = result.output
        code = result.report.error_code or DEFAULT_CODE.get(outcome, "")
        self.after_run(attempt, outcome, code, reported=True, explicit=result.report.explicit_retry_delay_ms)
        assert (answer.job_state, answer.retry_delay_ms) == (attempt.state_after, attempt.retry_delay)
        assert result.sender is not None
        worker = WORKERS.index(result.sender)
        if attempt.id in self.memory[worker]:
            self.memory[worker].remove(attempt.id)
        return True

    def release(self, data: st.DataObject) -> None:
        message = AttemptMessage(*self.release_target(data))
        self.h.ops.process(WorkBatch(releases=[message]))
        self.settle(self.expect_release(message))

    def release_target(self, data: st.DataObject) -> tuple[str, WorkerIdentity]:
        attempt_id, worker = self.pick_attempt(data, JobState.RESERVED)
        return attempt_id, WORKERS[worker]

    def expect_release(self, message: AttemptMessage) -> bool:
        """R-12: a claim given back before start costs nothing and is claimable at once."""
        attempt = self.attempts[message.attempt_id]
        job = self.jobs[attempt.job_id]
        worker = WORKERS.index(message.sender)
        if attempt.id in self.memory[worker]:
            self.memory[worker].remove(attempt.id)
        if job.current != attempt.id or job.state is not JobState.RESERVED:
            return False
        self.end(attempt, Outcome.RELEASED, JobState.AVAILABLE, reported=True, code=None, streak=job.streak)
        job.run_at = self.now
        return True

    def batch(self, data: st.DataObject) -> None:
        """What several streams sent within one batch window, written in one transaction
        (the dispatcher's way): a few messages of both workers, perhaps about one job."""
        kinds = data.draw(st.lists(st.sampled_from(BATCHED), min_size=2, max_size=4), label="messages")
        batch = WorkBatch()
        for kind in kinds:
            if kind == "claim":
                batch.claims.append(self.claim_request(data))
            elif kind == "heartbeat":
                batch.heartbeats.append(self.heartbeat_request(data))
            elif kind == "result":
                batch.results.append(self.result_report(data))
            elif kind == "release":
                batch.releases.append(AttemptMessage(*self.release_target(data)))
            else:
                attempt_id, worker = self.pick_attempt(data, JobState.RESERVED)
                batch.starts.append(AttemptMessage(attempt_id, WORKERS[worker]))

        answers = self.h.ops.process(batch)

        # Heartbeats found the leases as they were before this batch's releases.
        leases = {job.id: job.lease_until for job in self.jobs.values()}
        changed = [
            self.expect_heartbeat(h, a) for h, a in zip(batch.heartbeats, answers.heartbeats, strict=True)
        ]
        changed += [self.expect_release(message) for message in batch.releases]
        changed += [
            self.expect_start(s.attempt_id, a, leases[self.attempts[s.attempt_id].job_id])
            for s, a in zip(batch.starts, answers.starts, strict=True)
        ]
        changed += [self.expect_result(r, a) for r, a in zip(batch.results, answers.results, strict=True)]
        changed += [self.expect_claim(c, a) for c, a in zip(batch.claims, answers.claims, strict=True)]
        self.settle(any(changed))

    def crash(self, data: st.DataObject) -> None:
        """A worker process dies and comes back: it forgets its attempts (and so never
        heartbeats them again); their leases lapse."""
        self.memory[data.draw(WORKER, label="worker")] = []
        self.unchanged()

    def forge(self, data: st.DataObject) -> None:
        """Another stream names a worker's attempt: refused, and nothing changes."""
        kind = data.draw(st.sampled_from(["start", "heartbeat", "result", "release"]), label="kind")
        attempt_id = data.draw(st.sampled_from(list(self.attempts)), label="victim")
        sender = data.draw(
            st.sampled_from(impostors(WORKERS[self.attempts[attempt_id].worker])), label="sender"
        )
        if kind == "start":
            answer = self.h.start(attempt_id, sender)
            assert (answer.granted, answer.reason) == (False, "attempt held by another worker"), answer
        elif kind == "heartbeat":
            answers = self.h.ops.process(
                WorkBatch(heartbeats=[HeartbeatRequest([attempt_id], 60_000, sender)])
            )
            assert (answers.heartbeats[0].lost, answers.heartbeats[0].cancels) == ({attempt_id}, frozenset())
        elif kind == "result":
            answer = self.h.report(attempt_id, Outcome.SUCCEEDED, output=b"forged", sender=sender)
            assert not answer.accepted and answer.error is not None, answer
            assert answer.error.reason == "ATTEMPT_NOT_HELD"
        else:
            self.h.ops.process(WorkBatch(releases=[AttemptMessage(attempt_id, sender)]))
        self.unchanged()

    # -- time, maintenance, the operator ----------------------------------------------

    def time_passes(self, data: st.DataObject) -> None:
        """The clock moves; then perhaps the maintenance loops run (lease expiry, then
        due jobs). Without them, late heartbeats and starts meet a lapsed lease."""
        self.h.clock.advance(data.draw(ADVANCES_MS, label="ms"))
        expire = data.draw(st.booleans(), label="expire leases")
        promote = data.draw(st.booleans(), label="promote due jobs")
        if expire:
            self.expire_leases()
        if promote:
            self.promote_due()
        if not (expire or promote):
            self.unchanged()

    def expire_leases(self) -> None:
        now = self.now
        lapsed = [
            j
            for j in self.jobs.values()
            if j.state in LEASED and j.lease_until is not None and j.lease_until <= now
        ]

        answers = expire_leases(self.h.ops)

        for job in lapsed:
            attempt = self.attempts[job.current or ""]
            if job.state is JobState.RUNNING:  # a started run whose lease lapsed
                self.after_run(attempt, Outcome.ABANDONED, "lease_expired", reported=False)
                continue
            streak, code = job.streak + 1, "unstarted_lease_expired"  # no charge, but counted
            if job.cancel_requested:
                self.end(
                    attempt,
                    Outcome.UNSTARTED_ABANDONED,
                    JobState.CANCELLED,
                    reported=False,
                    code=code,
                    job_code="cancelled",
                    streak=streak,
                )
            elif streak >= job.settings.max_unstarted_abandonments:
                self.end(
                    attempt,
                    Outcome.UNSTARTED_ABANDONED,
                    JobState.FAILED,
                    reported=False,
                    code="reservation_abandonment_exhausted",
                    streak=streak,
                )
            else:  # no jitter: initial x 2^(streak-1), capped
                initial, cap = job.settings.unstarted_initial_delay_ms, job.settings.unstarted_max_delay_ms
                self.end(
                    attempt,
                    Outcome.UNSTARTED_ABANDONED,
                    JobState.SCHEDULED,
                    reported=False,
                    code=code,
                    delay=min(initial * 2 ** (streak - 1), cap),
                    streak=streak,
                )
        assert answers.terminal_job_ids == {j.id for j in lapsed if j.state.terminal}

    def promote_due(self) -> None:
        now = self.now
        for job in self.jobs.values():
            if job.state is JobState.SCHEDULED and job.run_at <= now:
                job.move(JobState.AVAILABLE)
        promote_due(self.h.ops)

    def cancel(self, data: st.DataObject) -> None:
        job = self.jobs[data.draw(st.sampled_from(list(self.jobs)), label="job")]
        if job.state.terminal:
            with pytest.raises(FailedPrecondition):
                self.manage.cancel(job.id, OPERATOR)
            self.unchanged()
            return

        managed = self.manage.cancel(job.id, OPERATOR)

        if job.state is JobState.RUNNING:  # flagged, and its worker told
            assert job.holder is not None
            pushes = [(p.worker_id, p.attempt_id) for p in managed.effects.cancel_pushes]
            assert pushes == [(WORKERS[job.holder].worker_id, job.current)]
            if job.cancel_requested:
                self.unchanged()  # asked again: told again, nothing written
            else:
                job.cancel_requested = True
                job.move(JobState.RUNNING, job.current)
        elif job.current is not None:  # reserved: the unstarted claim ends with it, uncharged
            self.end(
                self.attempts[job.current],
                Outcome.CANCELLED,
                JobState.CANCELLED,
                reported=False,
                code="cancelled",
                streak=job.streak,
            )
        else:
            job.move(JobState.CANCELLED)
            job.finished_at, job.last_error_code = self.now, "cancelled"
        assert managed.job.state is job.state

    def manual_retry(self, data: st.DataObject) -> None:
        ended = [j for j in self.jobs.values() if j.state.terminal]
        pool = ended if ended and data.draw(st.booleans(), label="an ended job") else list(self.jobs.values())
        job = data.draw(st.sampled_from(pool), label="job")
        if job.state not in (JobState.FAILED, JobState.CANCELLED):
            with pytest.raises(FailedPrecondition):
                self.manage.retry(job.id, OPERATOR)
            self.unchanged()
            return

        self.manage.retry(job.id, OPERATOR)

        # the next generation, available now, with fresh budgets.
        job.move(JobState.AVAILABLE)
        job.generation += 1
        job.executions = job.streak = 0
        job.run_at, job.finished_at, job.last_error_code, job.output = self.now, None, None, None
        job.cancel_requested = False
        self.retried = job.id

    # -- what must hold after every step ----------------------------------------------

    @invariant()
    def store_agrees(self) -> None:
        world = self.read()
        before, unchanged, retried = self.world, self.expect_unchanged, self.retried
        self.world, self.expect_unchanged, self.retried = world, False, None
        self.delays.clear()
        if unchanged:
            assert world == before, "this step must change nothing in the store"
        for job_id, seen in world.items():
            previous = before.get(job_id)
            if previous is not None and previous.job.state.terminal and job_id != retried:
                assert seen == previous, f"job {job_id} ended {previous.job.state.value} and then changed"
            self.check_job(self.jobs[job_id], seen, previous)
        assert sum(self.h.store.count_by_state().values()) == len(self.jobs)

    def check_job(self, model: ModelJob, seen: Seen, previous: Seen | None) -> None:
        job = seen.job
        if model.lease_until == LEASE_AS_STORED and job.lease_expires_at_ms is not None:
            assert job.lease_expires_at_ms >= (model.lease_floor or 0), "a start shortened the lease"
            model.lease_until = job.lease_expires_at_ms
        assert isinstance(job.state, JobState)
        # The history: a chain of allowed transitions, appended to, never rewritten.
        # (Only the newest max_history_per_job entries are kept.)
        history, kept = seen.transitions, self.h.store.bounds.max_history_per_job
        first = job.history_seq - len(history) + 1
        assert job.history_seq == len(model.history)
        assert len(history) == min(job.history_seq, kept)
        assert [t.seq for t in history] == list(range(first, job.history_seq + 1))
        if first == 1:
            assert (history[0].from_state, history[0].reason) == (None, "enqueued")
        for one, following in itertools.pairwise(history):
            assert following.from_state is one.to_state
            allowed = TRANSITIONS[one.to_state] | {one.to_state}
            assert following.to_state in allowed, following
        assert history[-1].to_state is job.state
        if previous is not None:  # appended to, never rewritten
            earlier = {t.seq: t for t in previous.transitions}
            assert all(earlier[t.seq] == t for t in history if t.seq in earlier)
        assert [(t.from_state, t.to_state, t.attempt_id) for t in history] == model.history[-len(history) :]

        # Executions: the started attempts of this generation, within the budget.
        generation = [a for a in seen.attempts.values() if a.generation == job.generation]
        started = sorted(a.execution_number for a in generation if a.started_at_ms is not None)
        assert job.executions == len(started) <= job.max_executions
        assert started == list(range(1, len(started) + 1))
        assert job.unstarted_streak <= job.max_unstarted_abandonments

        # At most one success per generation; a succeeded job has its holder's output.
        for number in range(1, job.generation + 1):
            wins = [
                a for a in seen.attempts.values() if a.generation == number and a.outcome is Outcome.SUCCEEDED
            ]
            assert len(wins) <= 1, wins
        if job.state is JobState.SUCCEEDED:
            [win] = [a for a in generation if a.outcome is Outcome.SUCCEEDED]
            assert job.output == f"{win.worker_id}:{win.id}".encode()

        # A current attempt (open, held, leased) exactly while reserved or running.
        open_attempts = [a.id for a in seen.attempts.values() if a.outcome is None]
        if job.state in LEASED:
            current = seen.attempts[job.current_attempt_id or ""]
            assert open_attempts == [current.id]
            assert (current.generation, current.worker_id) == (job.generation, job.worker_id)
            assert (current.started_at_ms is not None) == (job.state is JobState.RUNNING)
            assert job.lease_expires_at_ms is not None
        else:
            assert (job.current_attempt_id, job.worker_id, job.lease_expires_at_ms) == (None, None, None)
            assert open_attempts == []
        assert (job.finished_at_ms is not None) == job.state.terminal

        # The model: what each step said must have happened.
        assert (
            job.state,
            job.generation,
            job.executions,
            job.unstarted_streak,
            job.current_attempt_id,
            job.worker_id,
            job.lease_expires_at_ms,
            job.run_at_ms,
            job.cancel_requested,
            job.finished_at_ms,
            job.last_error_code,
            job.output,
        ) == (
            model.state,
            model.generation,
            model.executions,
            model.streak,
            model.current,
            None if model.holder is None else WORKERS[model.holder].worker_id,
            model.lease_until,
            model.run_at,
            model.cancel_requested,
            model.finished_at,
            model.last_error_code,
            model.output,
        )
        assert sorted(seen.attempts) == sorted(a for a, m in self.attempts.items() if m.job_id == model.id)
        for attempt in seen.attempts.values():
            m = self.attempts[attempt.id]
            identity = WORKERS[m.worker]
            assert (
                attempt.job_id,
                attempt.generation,
                attempt.worker_id,
                attempt.token_id,
                attempt.claimed_at_ms,
                attempt.started_at_ms,
                attempt.execution_number,
                attempt.outcome,
                attempt.reported,
                attempt.error_code,
                attempt.retry_delay_ms,
                attempt.job_state_after,
                attempt.finished_at_ms,
            ) == (
                m.job_id,
                m.generation,
                identity.worker_id,
                identity.token_id,
                m.claimed_at,
                m.started_at,
                m.execution_number,
                m.outcome,
                m.reported,
                m.error_code,
                m.retry_delay,
                m.state_after,
                m.finished_at,
            ), attempt.id


@pytest.mark.timeout(900)  # shrinking a failure replays many examples: let it finish
def test_the_lifecycle_keeps_its_rules_whatever_the_order(harness: Harness) -> None:
    engine = create_engine(harness.store.url, poolclass=NullPool)

    def clear() -> None:
        """Each example starts from an empty store (the audit log is append-only and
        holds no job state, so it stays)."""
        with engine.begin() as conn:
            for table in (transitions, attempts, jobs):
                conn.execute(delete(table))

    try:
        run_state_machine_as_test(lambda: LifecycleMachine(harness, clear), settings=MACHINE_SETTINGS)
    finally:
        engine.dispose()
