"""Queue controls (R-17): list the queues with their counts (a page at a time), show one
with what its controls hold back, pause and resume them, cap how many of a queue's jobs
run at once across every worker and replica, and delete an empty one. Each change is one
transaction with its audit event; retention forgets the queues that hold no jobs and
have no controls (``forget_idle``)."""

from __future__ import annotations

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor
from coordinator.domain.backlog import QueueView
from coordinator.domain.clock import Clock
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.rates import QueueRate, RateError
from coordinator.domain.records import QueueRecord, QueueStats
from coordinator.domain.states import JobState
from coordinator.errors import FailedPrecondition, InvalidArgument, NotFound
from coordinator.service import audit
from coordinator.service.effects import Effects
from coordinator.service.paging import decode_queue_token, encode_queue_token
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

    def page(self, *, page_size: int, page_token: str) -> tuple[list[QueueStats], str]:
        """A page of queues in natural order, each with its jobs counted per state, and the next
        page's token ('' at the end). The size is clamped to ``max_page_size``; the token
        is checked before any read."""
        if page_size < 0:
            raise InvalidArgument(
                "page_size", f"must not be negative, got {page_size}", reason="OUT_OF_RANGE"
            )
        size = self.store.bounds.clamp_page_size(page_size or self.config.default_page_size)
        after = decode_queue_token(page_token) if page_token else None
        listed = self.store.queue_stats(self.clock.now_ms(), after_name=after, limit=size + 1)
        page = listed[:size]
        return page, (encode_queue_token(page[-1].queue.name) if len(listed) > size else "")

    def get(self, name: str) -> QueueView:
        """One queue as a page lists it, and what each of its controls holds back of its
        available jobs now, counted as the held-back gauge counts them (a per-key control
        walks at most ``held_back_walked_jobs`` due jobs). The name is checked before any
        read; an unknown queue is NOT_FOUND."""
        check_name("queue", name)
        now_ms = self.clock.now_ms()
        found = self.store.queue_stats(now_ms, name=name)
        if not found:
            raise _not_found(name)
        stats = found[0]
        return QueueView(stats, self.store.held_back_of(stats, now_ms, self.config.held_back_walked_jobs))

    def totals(self) -> tuple[int, dict[JobState, int]]:
        """How many queues are known, and the jobs of all of them per state."""
        return self.store.job_totals()

    def demand(self, target: DemandTarget, cap: int, leased_enough: bool = False) -> SlotDemand:
        """The worker slots ``target`` wants now (its leased jobs and the due ones its
        controls let run now, each counted up to ``cap``; with ``leased_enough``, due is
        not read once the leased jobs reach ``cap``)."""
        scan = self.config.scaler.max_counted_jobs
        now_ms = self.clock.now_ms()
        return self.store.slot_demand(target, now_ms, cap, scan, leased_enough=leased_enough)

    def delete(self, name: str, actor: Actor) -> QueueRecord:
        """Deletes an empty queue and its controls (audited, ``queue.delete``); it is made
        again by the next enqueue to it. A queue that still holds jobs is refused
        (FAILED_PRECONDITION, ``QUEUE_NOT_EMPTY``, with its counts) and nothing changes."""
        check_name("queue", name)

        def delete(tx: Tx) -> QueueRecord:
            record = tx.lock_queue(name)
            if record is None:
                raise _not_found(name)
            counts = tx.queue_job_counts(name)
            if counts or tx.queue_has_jobs(name):
                raise _not_empty(name, counts)
            tx.delete_queues([name])
            tx.insert_audit_event(audit.event(actor, audit.QUEUE_DELETE, name, self.clock.now_ms()))
            return record

        return self.store.transact(delete, what=f"deleting queue {name}")

    def forget_idle(self, limit: int) -> list[str]:
        """Deletes up to ``limit`` queues that hold no jobs and have no controls (one
        transaction); retention calls it after purging, until a call comes back short."""
        return self.store.transact(lambda tx: tx.forget_idle_queues(limit), what="forgetting idle queues")

    def pause(self, name: str, actor: Actor) -> tuple[QueueRecord, Effects]:
        """A paused queue hands out no new claims; running jobs finish."""
        return self._change(name, actor, audit.QUEUE_PAUSE, "paused", paused=True)

    def resume(self, name: str, actor: Actor) -> tuple[QueueRecord, Effects]:
        return self._change(name, actor, audit.QUEUE_RESUME, "resumed", paused=False)

    def set_limit(self, name: str, limit: int | None, actor: Actor) -> tuple[QueueRecord, Effects]:
        """At most ``limit`` jobs of the queue reserved or running at once (None: no limit).
        Raises InvalidArgument for a limit below 1."""
        _check_limit(limit)
        detail = f"limit {limit}" if limit is not None else "no limit"
        return self._change(name, actor, audit.QUEUE_LIMIT, detail, limit=limit)

    def set_key_limit(self, name: str, limit: int | None, actor: Actor) -> tuple[QueueRecord, Effects]:
        """At most ``limit`` jobs of one concurrency key of the queue reserved or running at
        once (None: no per-key limit). Raises InvalidArgument for a limit below 1."""
        _check_limit(limit)
        detail = f"key limit {limit}" if limit is not None else "no key limit"
        return self._change(name, actor, audit.QUEUE_KEY_LIMIT, detail, key_limit=limit)

    def set_rate(
        self, name: str, count: int | None, period_ms: int, per_key: bool, actor: Actor
    ) -> tuple[QueueRecord, Effects]:
        """At most ``count`` starts of the queue's jobs (or of each key's, ``per_key``)
        per ``period_ms``; a ``count`` of None removes the rate. Raises InvalidArgument,
        changing nothing, for a count or period out of bounds (``domain.rates``)."""
        rate = None
        if count is not None:
            try:
                rate = QueueRate(count, period_ms, per_key)
            except RateError as error:
                raise InvalidArgument(
                    "rate",
                    f"{error}; to remove the rate, send no count",
                    reason="OUT_OF_RANGE",
                    metadata={"count": count, "period_ms": period_ms},
                ) from error
        detail = f"rate {rate.describe()}" if rate is not None else "no rate"
        return self._change(name, actor, audit.QUEUE_RATE, detail, rate=rate)

    def _change(
        self,
        name: str,
        actor: Actor,
        action: str,
        detail: str,
        *,
        paused: bool | None = None,
        limit: int | Unset | None = UNSET,
        key_limit: int | Unset | None = UNSET,
        rate: QueueRate | Unset | None = UNSET,
    ) -> tuple[QueueRecord, Effects]:
        check_name("queue", name)

        def change(tx: Tx) -> QueueRecord:
            now = self.clock.now_ms()
            record = tx.set_queue_controls(
                name, now, paused=paused, limit=limit, key_limit=key_limit, rate=rate
            )
            if record is None:
                raise _not_found(name)
            tx.insert_audit_event(audit.event(actor, action, name, now, detail))
            if paused is False or not all(isinstance(c, Unset) for c in (limit, key_limit, rate)):
                tx.notify_jobs_available()  # resumed or limit changed: claims may take more now
            return record

        record = self.store.transact(change, what=f"a change of queue {name}")
        # Resumed or given more room: idle workers may claim now.
        return record, Effects(available_changed=not record.paused)


def _not_found(name: str) -> NotFound:
    return NotFound(
        f"queue {name!r} does not exist (no job was enqueued to it, or it was deleted once empty)",
        reason="QUEUE_NOT_FOUND",
        metadata={"queue": name},
    )


def _not_empty(name: str, counts: dict[JobState, int]) -> FailedPrecondition:
    unfinished = sum(count for state, count in counts.items() if not state.terminal)
    held = ", ".join(f"{count} {state.value}" for state, count in sorted(counts.items()))
    advice = (
        "cancel them or let them finish, then purge them"
        if unfinished
        else "purge them first (runwick purge), or let retention remove them"
    )
    return FailedPrecondition(
        f"queue {name!r} still holds jobs ({held or 'not counted yet'}); {advice}. Nothing was deleted",
        reason="QUEUE_NOT_EMPTY",
        metadata={"queue": name, "unfinished": unfinished, "jobs": sum(counts.values())},
    )


def _check_limit(limit: int | None) -> None:
    if limit is not None and not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        raise InvalidArgument(
            "limit",
            f"must be 1 to {MAX_CONCURRENCY_LIMIT}, got {limit}; to remove the limit, send none",
            reason="OUT_OF_RANGE",
            metadata={"limit": limit},
        )
