"""Tables and indexes. Times are integer milliseconds since the epoch on both engines.

Index choices follow what job tables teach (SPEC §8): the claim index is partial on the
claimable states and ordered like the claim; ``lease_expires_at_ms`` is deliberately not
indexed so heartbeats stay HOT updates on PostgreSQL.
"""

from __future__ import annotations

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
    text,
)

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_AutoId = BigInteger().with_variant(Integer(), "sqlite")

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("wire_name", String(256), nullable=False),
    Column("queue", String(256), nullable=False),
    Column("state", String(16), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("run_at_ms", BigInteger, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("payload_version", Integer, nullable=False),
    Column("idempotency_key", String(256)),
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
    Column("current_attempt_id", String(36)),
    Column("worker_id", String(256)),
    Column("lease_expires_at_ms", BigInteger),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("finished_at_ms", BigInteger),
    Column("last_error_code", String(128)),
    Column("output", LargeBinary),
    Column("history_seq", Integer, nullable=False),
)

_CLAIMABLE = "state IN ('available', 'scheduled')"
_LEASED = "state IN ('reserved', 'running')"

Index(
    "ix_jobs_claim",
    jobs.c.queue,
    jobs.c.priority.desc(),
    jobs.c.run_at_ms,
    jobs.c.id,
    sqlite_where=text(_CLAIMABLE),
    postgresql_where=text(_CLAIMABLE),
)
Index("ix_jobs_leased", jobs.c.state, sqlite_where=text(_LEASED), postgresql_where=text(_LEASED))
Index("ix_jobs_state_id", jobs.c.state, jobs.c.id)
Index("ix_jobs_queue_id", jobs.c.queue, jobs.c.id)
Index(
    "ux_jobs_idempotency_key",
    jobs.c.idempotency_key,
    unique=True,
    sqlite_where=text("idempotency_key IS NOT NULL"),
    postgresql_where=text("idempotency_key IS NOT NULL"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("worker_id", String(256), nullable=False),
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
)
Index("ix_attempts_job", attempts.c.job_id, attempts.c.claimed_at_ms)

transitions = Table(
    "transitions",
    metadata,
    Column("id", _AutoId, primary_key=True, autoincrement=True),
    Column("job_id", String(36), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("from_state", String(16)),
    Column("to_state", String(16), nullable=False),
    Column("attempt_id", String(36)),
    Column("reason", String(128)),
)
Index("ix_transitions_job_seq", transitions.c.job_id, transitions.c.seq)
