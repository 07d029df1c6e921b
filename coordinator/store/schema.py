"""Tables and indexes. Times are integer milliseconds since the epoch on both engines.

Index choices follow what job tables teach (docs/scaling.md): the claim index is partial on the
claimable states and ordered like the claim; ``lease_expires_at_ms`` is deliberately not
indexed so heartbeats stay HOT updates on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    false,
    text,
)

from coordinator.domain.naming import MAX_NATURAL_KEY_CHARS
from coordinator.domain.states import CLAIMABLE_STATES, LEASED_STATES, JobState
from worker_sdk.trace_rules import MAX_TRACESTATE_BYTES, TRACEPARENT_LENGTH

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_AutoId = BigInteger().with_variant(Integer(), "sqlite")


def _identifier(length: int) -> String:
    """An identifier column of the job path (IDs, wire names, queues, states, worker IDs,
    keys): compared byte by byte on both engines. SQLite compares text that way already;
    on PostgreSQL the ``"C"`` collation does, where the database's own collation (a
    locale's, even ``C.UTF-8``) runs ``strcoll`` for every comparison an index insert or
    lookup makes, a tenth of the server's time under load. It also orders IDs and names
    as SQLite does."""
    return String(length).with_variant(String(length, collation="C"), "postgresql")


jobs = Table(
    "jobs",
    metadata,
    Column("id", _identifier(36), primary_key=True),
    Column("wire_name", _identifier(256), nullable=False),
    Column("queue", _identifier(256), nullable=False),
    Column("state", _identifier(16), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("run_at_ms", BigInteger, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("payload_version", Integer, nullable=False),
    Column("idempotency_key", _identifier(256)),
    # Effective settings, copied at enqueue.
    Column("max_executions", Integer, nullable=False),
    Column("retry_initial_delay_ms", BigInteger, nullable=False),
    Column("retry_max_delay_ms", BigInteger, nullable=False),
    Column("execution_timeout_ms", BigInteger),
    Column("max_unstarted_abandonments", Integer, nullable=False),
    Column("unstarted_initial_delay_ms", BigInteger, nullable=False),
    Column("unstarted_max_delay_ms", BigInteger, nullable=False),
    # Lifecycle counters of the current generation.
    Column("generation", Integer, nullable=False),
    Column("executions", Integer, nullable=False),
    Column("unstarted_streak", Integer, nullable=False),
    Column("current_attempt_id", _identifier(36)),
    Column("worker_id", _identifier(256)),
    Column("lease_expires_at_ms", BigInteger),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("finished_at_ms", BigInteger),
    Column("last_error_code", String(128)),
    Column("output", LargeBinary),
    Column("history_seq", Integer, nullable=False),
    # cancelled while running; the run's end (or its lease lapsing) cancels the job.
    Column("cancel_requested", Boolean, nullable=False, default=False, server_default=false()),
    # Unique jobs: at most one job per (queue, wire_name, unique_key) that has not ended.
    Column("unique_key", _identifier(256)),
    # The enqueuer's W3C trace context, handed to the worker (worker_sdk.trace_rules).
    Column("traceparent", String(TRACEPARENT_LENGTH)),
    Column("tracestate", String(MAX_TRACESTATE_BYTES)),
    # Flow control (docs/flow-control.md): the key a queue's per-key running limit counts
    # the job under; '' is the implicit key every job without one shares.
    Column("concurrency_key", _identifier(256), nullable=False, server_default=""),
)
JOB_COLUMNS = tuple(jobs.columns.keys())
"""The jobs table's columns in table order: what a statement written out selects of a job."""


def state_in(states: Iterable[JobState]) -> str:
    """SQL text saying a job is in one of ``states``: ``state IN ('a', 'b')``, the states
    in name order, so the same states always give the same words."""
    return "state IN (" + ", ".join(f"'{state.value}'" for state in sorted(states)) + ")"


_CLAIMABLE = state_in(CLAIMABLE_STATES)
CLAIMABLE_PREDICATE = _CLAIMABLE
"""The claim and due indexes' predicate, generated from the domain's claimable states
(``domain.states.is_claimable`` is the rule): a query must state it word for word (as
text, not bound parameters) for a planner to use those partial indexes."""
_LEASED = state_in(LEASED_STATES)
LEASED_PREDICATE = _LEASED
"""The leased index's predicate, for the same reason."""

Index(
    "ix_jobs_claim",
    jobs.c.queue,
    jobs.c.priority.desc(),
    jobs.c.run_at_ms,
    jobs.c.id,
    sqlite_where=text(_CLAIMABLE),
    postgresql_where=text(_CLAIMABLE),
)
# Leased jobs by state and holder: the dashboard counts each worker's leases from this
# index alone. ``worker_id`` changes only with ``state`` (claim, end), so it adds no index
# write that the state change does not already make.
Index(
    "ix_jobs_leased",
    jobs.c.state,
    jobs.c.worker_id,
    sqlite_where=text(_LEASED),
    postgresql_where=text(_LEASED),
)
# The jobs of one type, newest first (a list filtered by wire name); IDs and wire names
# never change, so jobs' updates never touch it.
Index("ix_jobs_wire_name_id", jobs.c.wire_name, jobs.c.id)
# Fair turns (``store.claim_turns``): a queue's claimable keys at one priority, found one
# index probe each, and each key's next jobs in claim order.
Index(
    "ix_jobs_claim_turns",
    jobs.c.queue,
    jobs.c.priority.desc(),
    jobs.c.concurrency_key,
    jobs.c.run_at_ms,
    jobs.c.id,
    sqlite_where=text(_CLAIMABLE),
    postgresql_where=text(_CLAIMABLE),
)
# R-17 and per-key limits: each queue's reserved and running jobs, by key (a limited
# queue's claims count them, ``store.claim_keys``, ``store.claim_rates``), without a scan
# of the table. Partial: a job outside the leased states never enters it, so most state
# changes do not touch it (an index of every job's queue and state cost each state change
# a rewrite of its entry). One index for the queue and its keys: a claim, a start and an
# end each rewrite one entry fewer than with one index per question (throughput higher in
# 6 of 6 alternating pairs, by 1-4%, and within the noise of ``ab.sh``: benchmarks/LOG.md,
# 2026-12-07, fifth session).
Index(
    "ix_jobs_queue_key_leased",
    jobs.c.queue,
    jobs.c.concurrency_key,
    jobs.c.state,
    sqlite_where=text(_LEASED),
    postgresql_where=text(_LEASED),
)
Index(
    "ix_jobs_due",
    jobs.c.queue,
    jobs.c.run_at_ms,
    sqlite_where=text(_CLAIMABLE),
    postgresql_where=text(_CLAIMABLE),
)
_SCHEDULED = "state = 'scheduled'"
SCHEDULED_PREDICATE = _SCHEDULED
"""The scheduled index's predicate (due promotion)."""
# ``state`` leads although the predicate fixes it: SQLite's planner, without statistics,
# then prefers this index to ix_jobs_state_id for the due query.
Index(
    "ix_jobs_scheduled",
    jobs.c.state,
    jobs.c.run_at_ms,
    sqlite_where=text(_SCHEDULED),
    postgresql_where=text(_SCHEDULED),
)
Index("ix_jobs_state_id", jobs.c.state, jobs.c.id)
Index("ix_jobs_queue_id", jobs.c.queue, jobs.c.id)
_UNFINISHED = "unique_key IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'cancelled')"
UNIQUE_UNFINISHED_PREDICATE = _UNFINISHED
"""The unique index's predicate, stated word for word by the unique-key lookup (as text)
so that both planners use that index."""
# Keys are per queue (the tenancy boundary): the same key in two queues names two jobs,
# so a key guessed in one queue never finds, nor blocks, a job of another.
Index(
    "ux_jobs_unique_key",
    jobs.c.queue,
    jobs.c.wire_name,
    jobs.c.unique_key,
    unique=True,
    sqlite_where=text(_UNFINISHED),
    postgresql_where=text(_UNFINISHED),
)
# retention's purge query (``store.purge``) walks one terminal state by finish
# time: one partial index per terminal state. One index for all three (``state IN
# (...)``) was never used by SQLite for a purge of one state (it cannot prove that
# ``state = 'x'`` implies the IN list): it walked ix_jobs_state_id and sorted every job
# in the state. ``state`` leads although the predicate fixes it, as in ix_jobs_scheduled:
# SQLite's planner, without statistics, then prefers it to ix_jobs_state_id.
FINISHED_PREDICATES = {state: f"state = '{state.value}'" for state in JobState if state.terminal}
"""Each terminal state's index predicate, as the purge query must state it (as text)."""
for _state, _predicate in FINISHED_PREDICATES.items():
    Index(
        f"ix_jobs_{_state.value}_at",
        jobs.c.state,
        jobs.c.finished_at_ms,
        jobs.c.id,
        sqlite_where=text(_predicate),
        postgresql_where=text(_predicate),
    )
del _state, _predicate
Index(
    "ux_jobs_idempotency_key",
    jobs.c.queue,
    jobs.c.idempotency_key,
    unique=True,
    sqlite_where=text("idempotency_key IS NOT NULL"),
    postgresql_where=text("idempotency_key IS NOT NULL"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", _identifier(36), primary_key=True),
    Column("job_id", _identifier(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("worker_id", _identifier(256), nullable=False),
    Column("execution_number", Integer, nullable=False),
    Column("claimed_at_ms", BigInteger, nullable=False),
    Column("started_at_ms", BigInteger),
    Column("finished_at_ms", BigInteger),
    Column("outcome", String(32)),
    Column("error_code", String(128)),
    Column("exception_type", String(512)),
    Column("message", Text),
    Column("detail", Text),
    Column("retry_delay_ms", BigInteger),
    Column("job_state_after", String(16)),
    # True when the worker reported the outcome; a repeat of it is answered from here
    # while an outcome the coordinator recorded makes a late report stale.
    Column("reported", Boolean, nullable=False),
    # The token the claim was made with (None with authentication off): only streams of
    # this worker with this token may start, heartbeat, report or release the attempt.
    Column("token_id", _identifier(32)),
    # The latest progress its handler reported over heartbeats (domain.progress: a
    # small JSON text), None until one arrives.
    Column("progress", Text),
)
Index("ix_attempts_job", attempts.c.job_id, attempts.c.claimed_at_ms)

# every known queue (made by the first enqueue to it, deleted once empty) and its
# controls. Claims lock the row of a limited queue, so its concurrency limit holds
# across all workers and replicas.
queues = Table(
    "queues",
    metadata,
    Column("name", _identifier(256), primary_key=True),
    Column("paused", Boolean, nullable=False, default=False, server_default=false()),
    Column("concurrency_limit", Integer),
    # Most jobs of one concurrency key reserved or running at once (docs/flow-control.md).
    Column("key_limit", Integer),
    # A job with a concurrency key was enqueued to it: its claims take keys in turn.
    Column("keyed", Boolean, nullable=False, default=False, server_default=false()),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    # ``domain.naming.natural_key(name)``: listings page by (sort_key, name), which is
    # the names' natural order (cq2 before cq10).
    Column("sort_key", _identifier(MAX_NATURAL_KEY_CHARS), nullable=False, server_default=""),
    # Issue 41: at most rate_count starts per rate_period_ms (``domain.rates``), of the
    # queue or of each key (rate_per_key); NULL count: no rate.
    Column("rate_count", Integer),
    Column("rate_period_ms", BigInteger),
    Column("rate_per_key", Boolean, nullable=False, default=False, server_default=false()),
)
Index("ix_queues_sort_key", queues.c.sort_key, queues.c.name)

# Issue 41: a rated queue's grants per key and slot (``domain.rates``): a claim adds the
# jobs it takes to its slot, under the queue's row lock (PostgreSQL), so replicas share
# one count and a restart finds it. Rows older than a period and a slot are dropped by
# the next claim of the key. key is '' for a queue-wide rate.
queue_rate_slots = Table(
    "queue_rate_slots",
    metadata,
    Column("queue", _identifier(256), primary_key=True),
    Column("key", _identifier(256), primary_key=True),
    Column("slot_ms", BigInteger, primary_key=True),
    Column("granted", Integer, nullable=False),
)

# jobs per queue and state, maintained with every write: each transaction appends
# its changes as deltas (insert-only, so replicas never wait on a counter row), and a
# background pass folds them into ``queue_counts``. A count is the row plus the deltas.
queue_counts = Table(
    "queue_counts",
    metadata,
    Column("queue", _identifier(256), primary_key=True),
    Column("state", _identifier(16), primary_key=True),
    Column("count", BigInteger, nullable=False),
)
queue_count_deltas = Table(
    "queue_count_deltas",
    metadata,
    Column("id", _AutoId, primary_key=True, autoincrement=True),
    Column("queue", _identifier(256), nullable=False),
    Column("state", _identifier(16), nullable=False),
    Column("delta", Integer, nullable=False),
)

# The dashboard's throughput chart: how many jobs of each queue ended in each terminal
# state, per minute. Written by the count fold from the deltas it folds (a positive
# delta of a terminal state is jobs that ended there), so no write on the hot path and no
# scan of the jobs; minutes older than ``FINISHED_MINUTES_KEPT_MS`` are dropped.
queue_finished = Table(
    "queue_finished",
    metadata,
    Column("minute_ms", BigInteger, primary_key=True),
    Column("queue", _identifier(256), primary_key=True),
    Column("state", _identifier(16), primary_key=True),
    Column("count", BigInteger, nullable=False),
)

# one row per (child, parent). No foreign key to the parent: retention may
# purge a parent, and its output, copied here when it succeeded, stays for the child.
dependencies = Table(
    "dependencies",
    metadata,
    Column("child_id", _identifier(36), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("parent_id", _identifier(36), primary_key=True),
    Column("satisfied", Boolean, nullable=False),
    Column("parent_output", LargeBinary),
    # The parent's queue, kept with its output: a claim hands the output only to a worker
    # whose token may serve that queue, even after the parent itself is purged. NULL on
    # rows of before migration 0017 whose parent was purged already (queue unknown).
    # Only read, never compared in SQL nor indexed: no byte-wise collation is needed.
    Column("parent_queue", String(256)),
)
Index("ix_dependencies_parent", dependencies.c.parent_id)

# Each job's history, keyed by the job and its history sequence: every write of a job is
# guarded by the sequence it read, so no two transitions of a job share one. Three
# rows per job that runs once (a start's entry is read from its attempt, ``store.history``),
# the most written table: one B-tree per row (WITHOUT ROWID on SQLite; on
# PostgreSQL the key is the only index) and no foreign key, whose check was a lookup of
# the job per row. Nothing but a job's own writes adds its transitions, each holding the
# job (its row locked on PostgreSQL), and retention deletes them with the job
# (``store.purge``).
transitions = Table(
    "transitions",
    metadata,
    # The surrogate ID of before migration 0015, kept as a plain column that nothing
    # writes, so that a coordinator of an older release still reads a job's history
    # (it selects the column) while a rolling upgrade replaces it. A later migration
    # drops it.
    Column("id", BigInteger),
    Column("job_id", _identifier(36), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("from_state", String(16)),
    Column("to_state", String(16), nullable=False),
    Column("attempt_id", String(36)),
    Column("reason", String(128)),
    sqlite_with_rowid=False,
)

# API tokens: only a SHA-256 hash of each secret is stored. The secret is 256
# random bits, so a fast hash is enough: there is nothing to guess, and authentication
# stays cheap on every call (slow hashes are for low-entropy passwords).
tokens = Table(
    "tokens",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("secret_sha256", String(64), nullable=False),
    Column("scopes", String(128), nullable=False),
    # For work tokens: the queues a worker may subscribe to, comma-separated; NULL = any.
    Column("queues", Text),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("created_by", String(32)),
    Column("revoked_at_ms", BigInteger),
)

# Append-only (migrations 0002 and 0019 add triggers that refuse UPDATE, DELETE and, on
# PostgreSQL, TRUNCATE): who did what to which job, attempt or token, when and from
# where. Never error text.
audit_events = Table(
    "audit_events",
    metadata,
    Column("id", _AutoId, primary_key=True, autoincrement=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor_token_id", String(32)),
    Column("actor_name", String(128), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(128), nullable=False),
    Column("peer", String(256), nullable=False),
    Column("detail", Text),
)
Index("ix_audit_events_target", audit_events.c.target, audit_events.c.id)

# Recurring schedules. ``next_tick_ms`` is where the next pass starts (NULL while
# paused); each tick's job carries the idempotency key ``schedule:<name>:<tick>``, so the
# jobs table's unique key makes every tick one job whichever replica enqueues it.
schedules = Table(
    "schedules",
    metadata,
    Column("name", String(256), primary_key=True),
    Column("cron", String(256), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("wire_name", String(256), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("queue", String(256), nullable=False),
    Column("catch_up", String(16), nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("next_tick_ms", BigInteger),
    Column("last_tick_ms", BigInteger),
    Column("last_job_id", String(36)),
)
Index("ix_schedules_next_tick", schedules.c.next_tick_ms)

# Ticks missed while no coordinator ran, newest kept (``StoreBounds.max_skipped_ticks``).
schedule_skipped_ticks = Table(
    "schedule_skipped_ticks",
    metadata,
    Column(
        "schedule_name",
        String(256),
        ForeignKey("schedules.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("tick_ms", BigInteger, primary_key=True),
    Column("recorded_at_ms", BigInteger, nullable=False),
)

# Dashboard sign-ins (``coordinator.service.dashboard``): the browser holds only a random
# session ID; the table keeps its SHA-256 (like a token's, nothing here signs anyone in),
# the token it stands for, and when it ends. A row lives until sign-out, its expiry, or
# the next sign-in's clean-up; every request joins it with ``tokens``, so a revoked
# token's sessions end with it. Shared by every replica, so any of them answers.
dashboard_sessions = Table(
    "dashboard_sessions",
    metadata,
    Column("id_sha256", String(64), primary_key=True),
    Column("token_id", String(32), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
)
Index("ix_dashboard_sessions_token", dashboard_sessions.c.token_id, dashboard_sessions.c.created_at_ms)
Index("ix_dashboard_sessions_expires", dashboard_sessions.c.expires_at_ms)
