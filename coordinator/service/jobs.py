"""The one place that joins domain and store for client requests: enqueue and reads.

The worker protocol's batched writes live in ``service.batch``; both are synchronous and
run on executor threads, so the asyncio loop never waits on the database.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Collection
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import Clock
from coordinator.domain.dependencies import DependencyCycle, insertion_order
from coordinator.domain.evolve import draft_class
from coordinator.domain.flow import WaitingReason, waiting_reason
from coordinator.domain.ids import uuid7
from coordinator.domain.lifecycle import initial_state
from coordinator.domain.progress import Progress, decode_progress
from coordinator.domain.records import AttemptRecord, Enqueued, JobRecord, NewJobSpec, Relatives
from coordinator.domain.schedules import TICK_KEY_PREFIX
from coordinator.domain.settings import JobSettings, SettingsError, SettingsLayer, resolve_settings
from coordinator.domain.states import JobState, is_claimable
from coordinator.errors import InvalidArgument, NotFound, PermissionDenied
from coordinator.service.enqueue import NewJob, insert_batch
from coordinator.service.paging import decode_job_token, encode_job_token
from coordinator.store import Store, Tx
from coordinator.validation import (
    batch_too_large,
    check_concurrency_key,
    check_name,
    check_parents,
    quote,
    require_id,
)
from worker_sdk.trace_rules import trace_context_problem

log = logging.getLogger(__name__)

MAX_KEY_LENGTH = 256
"""The ``jobs.idempotency_key`` and ``jobs.unique_key`` columns' size, in characters."""


class JobsService:
    """Enqueue and read jobs."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        config: CoordinatorConfig,
        rng: random.Random | None = None,
    ):
        self.store = store
        self.clock = clock
        self.config = config
        self.rng = rng or random.Random()

    def enqueue(self, specs: list[NewJobSpec], reachable: Collection[str] | None = None) -> list[Enqueued]:
        """Enqueues all of ``specs`` or none (R-3 settings copied, R-14 idempotency keys).
        ``reachable``: the queues the caller's token is restricted to (None: any); jobs
        go into them only and name existing parents in them only.

        Raises InvalidArgument naming the index of the first bad job; every bound of
        docs/limits.md (``store.bounds``) is checked before anything is written.
        """
        now = self.clock.now_ms()
        batch, order = self.checked_batch(specs, now, reachable)
        # When another enqueue with the same idempotency key commits first, the insert
        # fails and the next pass finds that job and returns it instead.
        return self.store.transact(
            lambda tx: insert_batch(tx, batch, order, now, reachable), what="an enqueue"
        )

    def checked_batch(
        self, specs: list[NewJobSpec], now: int, reachable: Collection[str] | None = None
    ) -> tuple[list[NewJob], list[int]]:
        """The new jobs of a whole enqueue call, every bound checked, in insertion order
        (parents first). Raises InvalidArgument for the first thing wrong, and
        PermissionDenied for a job outside the ``reachable`` queues."""
        if not specs:
            raise InvalidArgument("jobs", "at least one job is required", reason="FIELD_REQUIRED")
        limit = self.store.bounds.max_enqueue_batch
        if len(specs) > limit:
            raise batch_too_large(limit, len(specs))
        batch = [self._new_job(index, spec, now, from_client=True) for index, spec in enumerate(specs)]
        _check_reachable(batch, reachable)
        return batch, _insertion_order(batch)

    def enqueue_in(self, tx: Tx, specs: list[NewJobSpec]) -> list[Enqueued]:
        """``enqueue`` inside the caller's transaction (a schedule's tick commits with the
        schedule's advance); checks every job first, as ``enqueue`` does."""
        now = self.clock.now_ms()
        batch = [self._new_job(index, spec, now, from_client=False) for index, spec in enumerate(specs)]
        return insert_batch(tx, batch, _insertion_order(batch), now)

    def _new_job(self, index: int, spec: NewJobSpec, now: int, *, from_client: bool = True) -> NewJob:
        """The job ``spec`` asks for, every bound of it checked (InvalidArgument naming
        ``index`` otherwise)."""
        parents, job_id, settings = self._checked_spec(index, spec, now, from_client=from_client)
        record = _new_record(spec, job_id, settings, now)
        return NewJob(index, record, parents, chosen_id=bool(spec.job_id))

    def _checked_spec(
        self, index: int, spec: NewJobSpec, now: int, *, from_client: bool
    ) -> tuple[tuple[str, ...], str, JobSettings]:
        """Checks ``spec``'s fields; its parents (de-duplicated), its ID (chosen or made
        now) and its effective settings (R-3)."""
        bounds = self.store.bounds
        check_name("wire_name", spec.wire_name, index=index, max_length=bounds.max_wire_name_length)
        check_name("queue", spec.queue, index=index)
        if len(spec.payload) > bounds.max_payload_bytes:
            raise InvalidArgument(
                "payload",
                f"the {spec.wire_name} payload is {len(spec.payload)} bytes, over the limit of "
                f"{bounds.max_payload_bytes} bytes (max_payload_bytes); store the data elsewhere "
                "(a blob store, a table) and enqueue a reference to it, such as its key or ID",
                index=index,
                reason="PAYLOAD_TOO_LARGE",
                metadata={
                    "wire_name": spec.wire_name,
                    "size_bytes": len(spec.payload),
                    "limit_bytes": bounds.max_payload_bytes,
                },
            )
        parents = check_parents(spec.parent_ids, bounds.max_parents_per_job, index=index)
        job_id = require_id("job_id", spec.job_id, index=index) if spec.job_id else uuid7(now)
        _check_key("idempotency_key", spec.idempotency_key, index, "IDEMPOTENCY_KEY_INVALID")
        if from_client:
            _check_not_a_tick_key(spec.idempotency_key, index)
        _check_key("unique_key", spec.unique_key, index, "UNIQUE_KEY_INVALID")
        _check_trace_context(spec, index)
        check_concurrency_key(spec.concurrency_key, index=index)
        try:
            settings = _effective_settings(self.config.job_defaults, spec.settings)
        except SettingsError as exc:
            raise InvalidArgument(
                f"settings.{exc.field}",
                str(exc).split(": ", 1)[-1],
                index=index,
                reason="SETTING_OUT_OF_RANGE",
            ) from exc
        return parents, job_id, settings

    # -- reads -----------------------------------------------------------------------

    def get_job(self, job_id: str, field_name: str = "id") -> JobRecord:
        canonical = require_id(field_name, job_id)
        job = self.store.get_job(canonical)
        if job is None:
            raise NotFound(
                f"job {canonical} does not exist (never enqueued, or removed by retention)",
                reason="JOB_NOT_FOUND",
                metadata={"job_id": canonical},
            )
        return job

    def list_jobs(
        self,
        *,
        queue: str | None,
        state: JobState | None,
        wire_name: str | None,
        page_size: int,
        page_token: str,
    ) -> tuple[list[JobRecord], str]:
        """A page of jobs, newest first, and the token of the next page ('' at the end).

        The page size is clamped to ``max_page_size`` silently (docs/limits.md). Tokens are
        opaque (``service.paging``); a malformed one is INVALID_ARGUMENT
        (``PAGE_TOKEN_INVALID``) and reads nothing.
        """
        bounds = self.store.bounds
        if page_size < 0:
            raise InvalidArgument(
                "page_size", f"must not be negative, got {page_size}", reason="OUT_OF_RANGE"
            )
        if queue is not None:
            check_name("queue", queue)
        if wire_name is not None:
            check_name("wire_name", wire_name, max_length=bounds.max_wire_name_length)
        size = bounds.clamp_page_size(page_size if page_size > 0 else self.config.default_page_size)
        after = decode_job_token(page_token) if page_token else None
        page = self.store.list_jobs(
            queue=queue,
            state=state,
            wire_name=wire_name,
            after_id=after,
            limit=size + 1,
        )
        if len(page) > size:
            return page[:size], encode_job_token(page[size - 1].id)
        return page, ""

    def relatives(self, job: JobRecord) -> Relatives:
        """The parents and children (R-15) of a job just read."""
        return self.store.relatives(job.id)

    def current_progress(self, job: JobRecord) -> Progress | None:
        """The latest progress reported for the job's current attempt, if any."""
        if job.current_attempt_id is None:
            return None
        attempt = self.store.get_attempt(job.current_attempt_id)
        return decode_progress(attempt.progress) if attempt is not None else None

    def waiting_reason(self, job: JobRecord) -> WaitingReason | None:
        """Which queue control holds ``job`` back, when it is claimable now and one does
        (docs/flow-control.md); None otherwise. A bounded check of this one job."""
        now_ms = self.clock.now_ms()
        if not is_claimable(job.state, job.run_at_ms, now_ms):
            return None
        return waiting_reason(*self.store.waiting_facts(job, now_ms), key=job.concurrency_key)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        job = self.get_job(job_id, "job_id")
        return self.store.list_attempts(job.id)


def _new_record(spec: NewJobSpec, job_id: str, settings: JobSettings, now: int) -> JobRecord:
    """The record of a new job as ``spec`` asks for it."""
    run_at = now if spec.run_at_ms is None else max(spec.run_at_ms, 0)
    # Filled in as the record's draft, then made the record (as ``domain.evolve``
    # copies): the frozen dataclass's ``__init__`` sets each of its thirty fields
    # through ``object.__setattr__``, a third of this method's time a job.
    record: Any = object.__new__(_JobRecordDraft)
    record.id = job_id
    record.wire_name = spec.wire_name
    record.queue = spec.queue
    record.state = initial_state(run_at, now)
    record.priority = spec.priority
    record.run_at_ms = run_at
    record.payload = spec.payload
    record.payload_version = spec.payload_version
    record.idempotency_key = spec.idempotency_key or None
    # the effective settings, copied
    record.max_executions = settings.max_executions
    record.retry_initial_delay_ms = settings.retry_initial_delay_ms
    record.retry_max_delay_ms = settings.retry_max_delay_ms
    record.execution_timeout_ms = settings.execution_timeout_ms
    record.max_unstarted_abandonments = settings.max_unstarted_abandonments
    record.unstarted_initial_delay_ms = settings.unstarted_initial_delay_ms
    record.unstarted_max_delay_ms = settings.unstarted_max_delay_ms
    record.generation = 1
    record.executions = 0
    record.unstarted_streak = 0
    record.current_attempt_id = None
    record.worker_id = None
    record.lease_expires_at_ms = None
    record.created_at_ms = now
    record.updated_at_ms = now
    record.finished_at_ms = None
    record.last_error_code = None
    record.output = None
    record.history_seq = 1
    record.cancel_requested = False
    record.unique_key = spec.unique_key or None
    record.traceparent = spec.traceparent
    record.tracestate = spec.tracestate if spec.traceparent is not None else None
    record.concurrency_key = spec.concurrency_key
    record.__class__ = JobRecord
    return record  # type: ignore[no-any-return]


def _insertion_order(batch: list[NewJob]) -> list[int]:
    """Parents of the batch before their children; a repeated chosen ID or a cycle is
    refused before anything is written."""
    positions: dict[str, int] = {}
    for position, job in enumerate(batch):
        if job.record.id in positions:
            raise InvalidArgument(
                "job_id",
                f"{job.record.id} is also the ID of jobs[{positions[job.record.id]}]; each job of a batch "
                "needs its own ID",
                index=job.index,
                reason="DUPLICATE_JOB_ID",
            )
        positions[job.record.id] = position
    try:
        return insertion_order([[positions[p] for p in job.parent_ids if p in positions] for job in batch])
    except DependencyCycle as cycle:
        raise InvalidArgument(
            "parent_ids",
            f"the batch's parents form a cycle ({cycle}); a job cannot depend on itself, even through others",
            index=cycle.cycle[0],
            reason="DEPENDENCY_CYCLE",
        ) from cycle


@functools.lru_cache(maxsize=1024)
def _effective_settings(defaults: SettingsLayer, requested: SettingsLayer) -> JobSettings:
    """R-3: a job's effective settings, from the coordinator's defaults and what the
    enqueue asked for. Both layers are frozen and a batch repeats the same few, so each
    pair is resolved once."""
    return resolve_settings(defaults, requested)


_JobRecordDraft = draft_class(JobRecord)


def _check_not_a_tick_key(key: str | None, index: int) -> None:
    if key and key.startswith(TICK_KEY_PREFIX):
        raise InvalidArgument(
            "idempotency_key",
            f"{quote(key)} starts with {TICK_KEY_PREFIX!r}, which is reserved for the jobs of "
            "schedules' ticks; choose a key with another prefix",
            index=index,
            reason="IDEMPOTENCY_KEY_RESERVED",
            metadata={"prefix": TICK_KEY_PREFIX},
        )


def _check_key(field: str, key: str | None, index: int, reason: str) -> None:
    # Checked here so both engines refuse alike: SQLite would store an over-long key or a
    # NUL, PostgreSQL would fail the whole batch with a database error.
    if key and len(key) > MAX_KEY_LENGTH:
        raise InvalidArgument(
            field,
            f"{quote(key)} is {len(key)} characters, the limit is {MAX_KEY_LENGTH}",
            index=index,
            reason=reason,
        )
    if key and "\x00" in key:
        raise InvalidArgument(field, "must not contain NUL characters", index=index, reason=reason)


def _check_trace_context(spec: NewJobSpec, index: int) -> None:
    # Refused, not dropped: the SDKs send what their propagator made, so a malformed one
    # is a client's bug to surface, and a job is never stored with a context a worker
    # could not parse (docs/observability.md).
    if spec.traceparent is None and spec.tracestate is None:
        return
    problem = trace_context_problem(spec.traceparent or "", spec.tracestate or "")
    if problem is not None:
        raise InvalidArgument("trace_context", problem, index=index, reason="TRACE_CONTEXT_INVALID")


def _check_reachable(batch: list[NewJob], reachable: Collection[str] | None) -> None:
    """A token restricted to queues enqueues into those queues only: the queue is the
    tenancy boundary, and a job in another tenant's queue would find that tenant's jobs
    by their keys, and run on its workers."""
    if reachable is None:
        return
    for job in batch:
        if job.record.queue not in reachable:
            allowed = ", ".join(sorted(reachable))
            raise PermissionDenied(
                f"jobs[{job.index}].queue: this token may enqueue into queues [{allowed}] only, not "
                f"{quote(job.record.queue)}; nothing was enqueued",
                reason="QUEUE_NOT_ALLOWED",
                metadata={"index": job.index, "queue": job.record.queue},
            )
