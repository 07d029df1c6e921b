"""Retention and purge (R-19): terminal jobs removed by age, in short transactions of at
most ``StoreBounds.max_purge_batch`` jobs each.

The background loop (``scheduler.retention``) and an operator's purge (``PurgeJobs``,
``runwick purge``) run the same batches; an operator's purge is audited (``jobs.purge``)
in the transaction of its first batch, so no job is removed before the event commits.
Only terminal jobs are ever purged, so no waiting child can lose a parent it still
waits for; a purged parent's output lives on in its children's dependency rows (R-16).

After purging, retention forgets the queues left without jobs and without controls (not
paused, no concurrency limit), so names used once do not stay listed forever; a later
enqueue to one makes it again.
"""

from __future__ import annotations

from datetime import UTC, datetime

from coordinator.domain.access import Actor
from coordinator.domain.clock import Clock
from coordinator.domain.states import TERMINAL_STATES, JobState
from coordinator.errors import InvalidArgument
from coordinator.service import audit
from coordinator.store import Store, Tx

PURGEABLE = ", ".join(sorted(state.value for state in TERMINAL_STATES))


def check_purge(state: JobState | None, older_than_ms: int | None) -> tuple[JobState, int]:
    """The state and age of a purge request, or InvalidArgument naming the field and value."""
    if state is None:
        raise InvalidArgument("state", f"is required: one of {PURGEABLE}", reason="FIELD_REQUIRED")
    if not state.terminal:
        raise InvalidArgument(
            "state",
            f"{state.value!r} is not a terminal state; only {PURGEABLE} jobs are purged",
            reason="STATE_NOT_TERMINAL",
            metadata={"state": state.value},
        )
    if older_than_ms is None:
        raise InvalidArgument(
            "older_than",
            "is required: purge jobs that finished more than this long ago",
            reason="FIELD_REQUIRED",
        )
    if older_than_ms < 0:
        raise InvalidArgument(
            "older_than",
            f"must not be negative, got {older_than_ms} ms",
            reason="INVALID_DURATION",
            metadata={"older_than_ms": older_than_ms},
        )
    return state, older_than_ms


def show_ms(ms: int) -> str:
    """``ms`` since the epoch as an ISO-8601 UTC time, or the number when out of range."""
    try:
        return (
            datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        )
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms since the epoch"


class RetentionService:
    """One purge batch per call; callers loop until a batch comes back short."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    @property
    def batch_size(self) -> int:
        """Jobs per purge transaction: a batch smaller than this was the last one."""
        return self.store.bounds.max_purge_batch

    def cutoff_ms(self, older_than_ms: int) -> int:
        """Jobs that finished before this time are older than ``older_than_ms``."""
        return self.clock.now_ms() - older_than_ms

    def purge_batch(self, state: JobState, finished_before_ms: int, actor: Actor | None = None) -> int:
        """Removes one batch of ``state`` jobs that finished before ``finished_before_ms``
        and returns how many; with ``actor``, records the purge in the audit log in the
        same transaction (the first batch of an operator's purge)."""
        if not state.terminal:
            raise ValueError(f"only terminal jobs are purged, not {state.value} ones")

        def body(tx: Tx) -> int:
            if actor is not None:
                detail = f"state {state.value}, finished before {show_ms(finished_before_ms)}"
                now = self.clock.now_ms()
                tx.insert_audit_event(audit.event(actor, audit.JOBS_PURGE, state.value, now, detail))
            return tx.purge(state, finished_before_ms, self.batch_size)

        return self.store.transact(body, what="a purge")

    def forget_idle_queues(self) -> list[str]:
        """Deletes one batch of queues that hold no jobs and have no controls and returns
        their names; a batch shorter than ``batch_size`` was the last one."""

        def forget(tx: Tx) -> list[str]:
            tx.key_unkeyed_queues(self.batch_size)
            return tx.forget_idle_queues(self.batch_size)

        return self.store.transact(forget, what="forgetting idle queues")
