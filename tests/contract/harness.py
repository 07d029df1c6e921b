"""The store contract suite's harness: JobsService and WorkerOps over one Store, driven
by a FakeClock and a seeded random source, with short names for the worker protocol.

Every helper goes through the public service calls (``JobsService``, ``WorkerOps``) and
reads effects back from the store, so each test states a contract of the store on both
engines.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine, event, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor, Principal, Scope
from coordinator.domain.clock import FakeClock
from coordinator.domain.ids import parse_id
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import AttemptRecord, Enqueued, JobRecord, NewJobSpec, WorkerIdentity
from coordinator.domain.states import Outcome
from coordinator.scheduler.leases import expire_leases
from coordinator.service.batch import WorkerOps
from coordinator.service.jobs import JobsService
from coordinator.service.work import (
    AttemptMessage,
    BatchAnswers,
    Claimed,
    ClaimRequest,
    EnqueueItem,
    HeartbeatRequest,
    ResultAnswer,
    ResultReport,
    StartAnswer,
    WorkBatch,
)
from coordinator.store import Store
from coordinator.store.schema import attempts, jobs, transitions

WIRE = "payments.capture"
OTHER_WIRE = "emails.send"
QUEUE = "default"
WORKER = "worker-1"
SECOND = 1_000
LEASE_MS = 60 * SECOND
SEED = 20_260_101
OPERATOR = Actor(Principal("0123456789abcdef", "ops", frozenset({Scope.MANAGE})), "test")
"""An operator with the manage scope, for the management calls tests make."""


def r2_range(run_number: int, initial_ms: int, max_ms: int) -> tuple[int, int]:
    """R-2, written out independently of the domain: equal jitter in [nominal/2, nominal]."""
    nominal = min(initial_ms * 2 ** (run_number - 1), max_ms)
    return (nominal + 1) // 2, nominal


@dataclass
class Snapshot:
    """Everything the store holds about one job, to prove a write changed nothing."""

    job: JobRecord
    attempts: list[AttemptRecord]
    transitions: list[dict[str, Any]]


@dataclass
class Harness:
    store: Store
    clock: FakeClock
    config: CoordinatorConfig
    jobs: JobsService
    ops: WorkerOps

    @classmethod
    def build(cls, store: Store, clock: FakeClock, config: CoordinatorConfig) -> Harness:
        return cls(
            store=store,
            clock=clock,
            config=config,
            jobs=JobsService(store, clock, config, random.Random(SEED)),
            ops=WorkerOps(store, clock, config, random.Random(SEED)),
        )

    def with_config(self, **changes: Any) -> Harness:
        """Services over the same store and clock with a changed configuration."""
        return Harness.build(self.store, self.clock, dataclasses.replace(self.config, **changes))

    def with_bounds(self, **changes: Any) -> Harness:
        """Services over the same database and clock whose store applies changed bounds
        (docs/limits.md ``StoreBounds``)."""
        bounds = dataclasses.replace(self.store.bounds, **changes)
        config = dataclasses.replace(self.config, bounds=bounds)
        return Harness.build(self.store.with_bounds(bounds), self.clock, config)

    # -- enqueue ---------------------------------------------------------------------

    def enqueue(self, wire_name: str = WIRE, payload: bytes = b"{}", **fields: Any) -> str:
        return self.enqueue_specs([NewJobSpec(wire_name, payload, **fields)])[0].job_id

    def enqueue_specs(self, specs: list[NewJobSpec]) -> list[Enqueued]:
        return self.jobs.enqueue(specs)

    def enqueue_claiming(
        self, specs: Sequence[NewJobSpec], claims: Sequence[ClaimRequest]
    ) -> tuple[list[Enqueued], BatchAnswers]:
        """One enqueue call and ``claims`` in one worker batch, as the dispatcher writes
        them (the claims come after the call's jobs and may take them); raises the
        call's error if it failed."""
        batch = WorkBatch(enqueues=[EnqueueItem(list(specs))], claims=list(claims))
        answers = self.ops.process(batch)
        [outcome] = answers.enqueued
        if isinstance(outcome, Exception):
            raise outcome
        return outcome, answers

    # -- the worker protocol, one message per batch -------------------------------------

    def claim(
        self,
        count: int = 1,
        *,
        queues: tuple[str, ...] = (QUEUE,),
        wire_names: tuple[str, ...] = (WIRE, OTHER_WIRE),
        lease_ms: int = LEASE_MS,
        worker_id: str = WORKER,
        token_id: str | None = None,
    ) -> list[Claimed]:
        request = ClaimRequest(worker_id, queues, wire_names, count, lease_ms, token_id)
        return self.ops.process(WorkBatch(claims=[request])).claims[0]

    def claim_one(self, job_id: str | None = None, **kwargs: Any) -> Claimed:
        """Claims one job; with ``job_id``, from that job's queue, and checks it got that
        job (tests holding several claimable jobs give each its own queue)."""
        if job_id is not None:
            kwargs.setdefault("queues", (self.job(job_id).queue,))
        claimed = self.claim(1, **kwargs)
        assert len(claimed) == 1, f"expected one claim, got {claimed}"
        if job_id is not None:
            assert claimed[0].job.id == job_id
        return claimed[0]

    def holder(self, attempt_id: str) -> WorkerIdentity:
        """The stream that holds ``attempt_id`` (its claimer), or the default worker's."""
        attempt = self.store.get_attempt(attempt_id) if parse_id(attempt_id) == attempt_id else None
        if attempt is None:
            return WorkerIdentity(WORKER)
        return WorkerIdentity(attempt.worker_id, attempt.token_id)

    def start(self, attempt_id: str, sender: WorkerIdentity | None = None) -> StartAnswer:
        message = AttemptMessage(attempt_id, sender or self.holder(attempt_id))
        return self.ops.process(WorkBatch(starts=[message])).starts[0]

    def run(self, job_id: str | None = None, **claim_kwargs: Any) -> Claimed:
        """Claims one job and starts it (the handler is authorized)."""
        claimed = self.claim_one(job_id, **claim_kwargs)
        answer = self.start(claimed.attempt_id)
        assert answer.granted, answer
        return claimed

    def heartbeat(
        self, attempt_ids: list[str], lease_ms: int = LEASE_MS, sender: WorkerIdentity | None = None
    ) -> tuple[set[str], int]:
        """Returns the attempts reported lost and the new lease deadline."""
        sender = sender or (self.holder(attempt_ids[0]) if attempt_ids else WorkerIdentity(WORKER))
        answers = self.ops.process(WorkBatch(heartbeats=[HeartbeatRequest(attempt_ids, lease_ms, sender)]))
        return answers.lost[0], answers.lease_expires_at_ms[0]

    def report(
        self,
        attempt_id: str,
        outcome: Outcome = Outcome.SUCCEEDED,
        *,
        output: bytes | None = None,
        sender: WorkerIdentity | None = None,
        **report_fields: Any,
    ) -> ResultAnswer:
        result = ResultReport(
            attempt_id, Report(outcome, **report_fields), output, sender or self.holder(attempt_id)
        )
        return self.ops.process(WorkBatch(results=[result])).results[0]

    def release(self, attempt_id: str) -> BatchAnswers:
        return self.ops.process(WorkBatch(releases=[AttemptMessage(attempt_id, self.holder(attempt_id))]))

    def lapse(self, ms: int = LEASE_MS) -> BatchAnswers:
        """Lets ``ms`` pass and runs lease expiry."""
        self.clock.advance(ms)
        return expire_leases(self.ops)

    # -- reads -----------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord:
        job = self.store.get_job(job_id)
        assert job is not None, f"job {job_id} is not in the store"
        return job

    def attempts(self, job_id: str) -> list[AttemptRecord]:
        return self.store.list_attempts(job_id)

    def transitions(self, job_id: str) -> list[dict[str, Any]]:
        return [dataclasses.asdict(t) for t in self.store.list_transitions(job_id)]

    def snapshot(self, job_id: str) -> Snapshot:
        return Snapshot(self.job(job_id), self.attempts(job_id), self.transitions(job_id))

    def count_jobs(self) -> int:
        return sum(self.store.count_by_state().values())

    def count_attempts(self) -> int:
        return sum(len(self.attempts(job.id)) for job in self.all_jobs())

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the job tables in a stable order: equal before and after a write
        proves the write left the store exactly as it was (docs/limits.md)."""
        engine = create_engine(self.store.url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return {
                    table.name: [
                        tuple(row) for row in conn.execute(select(table).order_by(*table.primary_key.columns))
                    ]
                    for table in (jobs, attempts, transitions)
                }
        finally:
            engine.dispose()

    def all_jobs(self) -> list[JobRecord]:
        return self.store.list_jobs(queue=None, state=None, wire_name=None, after_id=None, limit=10_000)


@contextmanager
def sent_statements(*, executemany: bool = False) -> Iterator[list[tuple[str, Any]]]:
    """Every statement any engine sends while the block runs, with its parameters; with
    ``executemany``, the statements sent once for many parameter sets too."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if executemany or not many:
            sent.append((statement, parameters))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def count_sessions(admin_url: str, application_name: str) -> int:
    """PostgreSQL: the sessions named ``application_name`` the server has open."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            count = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": application_name},
            ).scalar()
        return int(count or 0)
    finally:
        admin.dispose()


def end_sessions(admin_url: str, application_name: str) -> int:
    """PostgreSQL: terminates the backend of every session named ``application_name``
    (``pg_terminate_backend``, waiting until each is gone); returns how many it ended."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            ended = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                    "WHERE application_name = :name"
                ),
                {"name": application_name},
            ).scalar()
        return int(ended or 0)
    finally:
        admin.dispose()


WAITING_ON_A_LOCK = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
"""PostgreSQL: how many backends wait for a lock now (a race test waits for its second side to block)."""
