"""Cancel calls as items of the writer's batch (R-8): a single-job cancel is committed in
the transaction of the next batch, with the enqueue calls and worker messages pending at
that moment (group commit), and fails alone.

Its ID is checked before it is queued (``JobCalls.cancel``). What can refuse it once
writing began is the job itself: gone, or ended already. ``ManagementService.cancel_in``
reads the job and refuses before any write, but each item still runs under its own
savepoint (``Tx.savepoint``) so that nothing a refused or failing cancel did (its
audit event included) outlives it, whatever raised. A store failure (a write conflict,
a lost connection) is the whole transaction's: ``Store.transact`` runs the batch again.

A bulk cancel is not an item: it is paged, a page per transaction of its own
(``service.bulk``), so a large one never holds the writer's batch for long.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.errors import CoordinatorError
from coordinator.service.manage import Managed, ManagementService
from coordinator.service.work import CancelItem
from coordinator.store import Tx
from coordinator.store.errors import StoreError

CancelOutcome = Managed | Exception
"""What became of one cancel item: the job after it, with its effects, or why it was
refused (nothing of it written)."""


def write_cancels(tx: Tx, manage: ManagementService, items: Sequence[CancelItem]) -> list[CancelOutcome]:
    """Carries out every cancel item in ``tx``, each under its own savepoint; what became
    of each, in order."""
    return [_cancel(tx, manage, item) for item in items]


def _cancel(tx: Tx, manage: ManagementService, item: CancelItem) -> CancelOutcome:
    try:
        with tx.savepoint():
            return manage.cancel_in(tx, item.job_id, item.actor)
    except StoreError:
        raise
    except CoordinatorError as refused:
        return refused
