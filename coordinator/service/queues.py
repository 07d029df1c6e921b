"""Queue controls (R-17): list the queues with their counts, pause and resume them, and
cap how many of a queue's jobs run at once across every worker and replica. Each change
is one transaction with its audit event."""

from __future__ import annotations

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor
from coordinator.domain.clock import Clock
from coordinator.domain.records import QueueRecord, QueueStats
from coordinator.errors import InvalidArgument, NotFound
from coordinator.service import audit
from coordinator.service.effects import Effects
from coordinator.store import UNSET, Store, Tx, Unset
from coordinator.validation import check_name

MAX_CONCURRENCY_LIMIT = 1_000_000


class QueueService:
    def __init__(self, store: Store, clock: Clock, config: CoordinatorConfig) -> None:
        self.store = store
        self.clock = clock
        self.config = config

    def fold_counts(self) -> int:
        """Folds the job-count deltas written since the last fold (a background pass)."""
        return self.store.transact(
            lambda tx: tx.fold_queue_counts(self.clock.now_ms()), what="folding queue counts"
        )

    def list(self) -> list[QueueStats]:
        """Every known queue, by name, with its jobs counted per state."""
        return self.store.queue_stats(self.clock.now_ms())

    def pause(self, name: str, actor: Actor) -> tuple[QueueRecord, Effects]:
        """A paused queue hands out no new claims; running jobs finish."""
        return self._change(name, actor, audit.QUEUE_PAUSE, "paused", paused=True)

    def resume(self, name: str, actor: Actor) -> tuple[QueueRecord, Effects]:
        return self._change(name, actor, audit.QUEUE_RESUME, "resumed", paused=False)

    def set_limit(self, name: str, limit: int | None, actor: Actor) -> tuple[QueueRecord, Effects]:
        """At most ``limit`` jobs of the queue reserved or running at once (None: no limit).
        Raises InvalidArgument for a limit below 1."""
        if limit is not None and not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
            raise InvalidArgument(
                "limit",
                f"must be 1 to {MAX_CONCURRENCY_LIMIT}, got {limit}; to remove the limit, send none",
                reason="OUT_OF_RANGE",
                metadata={"limit": limit},
            )
        detail = f"limit {limit}" if limit is not None else "no limit"
        return self._change(name, actor, audit.QUEUE_LIMIT, detail, limit=limit)

    def _change(
        self,
        name: str,
        actor: Actor,
        action: str,
        detail: str,
        *,
        paused: bool | None = None,
        limit: int | Unset | None = UNSET,
    ) -> tuple[QueueRecord, Effects]:
        check_name("queue", name)

        def change(tx: Tx) -> QueueRecord:
            now = self.clock.now_ms()
            record = tx.set_queue_controls(name, now, paused=paused, limit=limit)
            if record is None:
                raise NotFound(
                    f"queue {name!r} does not exist (no job was ever enqueued to it)",
                    reason="QUEUE_NOT_FOUND",
                    metadata={"queue": name},
                )
            tx.insert_audit_event(audit.event(actor, action, name, now, detail))
            if paused is False or not isinstance(limit, Unset):
                tx.notify_jobs_available()  # resumed or limit changed: claims may take more now
            return record

        record = self.store.transact(change, what=f"a change of queue {name}")
        # Resumed or given more room: idle workers may claim now.
        return record, Effects(available_changed=not record.paused)
