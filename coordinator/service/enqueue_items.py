"""Enqueue calls as items of the writer's batch: many producers' calls committed in one
transaction with the worker messages pending at that moment (group commit), each item
failing alone.

An item is checked first, outside the transaction (``JobsService.checked_batch``): a
bad job fails its call and nothing of it reaches the database. What can still fail once
writing began is a race with another transaction (an idempotency or unique key, or a
chosen job ID, taken by a concurrent enqueue on PostgreSQL) or a parent that is not
there: an item that names keys, IDs or parents is written under its own savepoint
(``Tx.savepoint``), so its failure rolls back its writes only. A taken key is tried
again under a new savepoint, which then finds the job that took it (R-14), as a whole
enqueue transaction run again did. An item with none of these cannot fail after its
checks but with the whole transaction (a lost connection), so it needs no savepoint,
and its writes stay held (PostgreSQL) to go out with the rest of the batch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from coordinator.errors import CoordinatorError
from coordinator.service.enqueue import NewJob, insert_batch
from coordinator.service.jobs import JobsService
from coordinator.service.work import EnqueueItem, EnqueueOutcome
from coordinator.store import Tx
from coordinator.store.errors import DuplicateKey, StoreError

ITEM_TRIES = 3
"""Savepoints an item gets when its keys keep being taken (``Store.transact`` gives a
whole transaction as many)."""


@dataclass(frozen=True, slots=True)
class CheckedItem:
    """An enqueue item whose jobs passed every check, in insertion order."""

    batch: list[NewJob]
    order: list[int]
    reachable: Collection[str] | None

    @property
    def may_fail_writing(self) -> bool:
        """Whether a write of this item can fail while the transaction goes on: a key or
        a chosen ID another enqueue may take, a parent to find."""
        return any(
            job.chosen_id or job.parent_ids or job.record.idempotency_key or job.record.unique_key
            for job in self.batch
        )


def check_items(
    jobs: JobsService, items: Sequence[EnqueueItem], now_ms: int
) -> list[CheckedItem | CoordinatorError]:
    """Each item checked, or the error that fails it (nothing of it is written)."""
    checked: list[CheckedItem | CoordinatorError] = []
    for item in items:
        try:
            batch, order = jobs.checked_batch(list(item.specs), now_ms, item.reachable)
        except CoordinatorError as exc:
            checked.append(exc)
        else:
            checked.append(CheckedItem(batch, order, item.reachable))
    return checked


def write_items(
    tx: Tx, checked: Sequence[CheckedItem | CoordinatorError], now_ms: int
) -> list[EnqueueOutcome]:
    """Writes every checked item in ``tx``; what became of each, in order."""
    return [item if isinstance(item, CoordinatorError) else _write(tx, item, now_ms) for item in checked]


def _write(tx: Tx, item: CheckedItem, now_ms: int) -> EnqueueOutcome:
    """One item's jobs, or its error. A store failure other than a taken key is the
    whole transaction's (``Store.transact`` runs it again): it is raised."""
    if not item.may_fail_writing:
        try:
            return insert_batch(tx, item.batch, item.order, now_ms, item.reachable)
        except StoreError:
            raise
        except CoordinatorError as exc:  # a queue past max_queues: refused before any write
            return exc
    for attempt in range(1, ITEM_TRIES + 1):
        try:
            with tx.savepoint():
                return insert_batch(tx, item.batch, item.order, now_ms, item.reachable)
        except DuplicateKey as taken:
            if attempt == ITEM_TRIES:
                return DuplicateKey(f"an enqueue: {taken}; try again")
        except StoreError:
            raise
        except CoordinatorError as exc:
            return exc
    raise AssertionError("unreachable")
