"""Issue 39: the rows one no-op job's life writes, table by table and transaction by
transaction, as the database counts them (row triggers, ``row_changes``), on both engines.
``docs/durability.md`` shows this table; a change to what a job writes changes both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.service.work import ClaimRequest
from coordinator.store import Store

from .harness import LEASE_MS, QUEUE, WIRE, WORKER, Harness
from .row_changes import Changes, RowChanges, as_markdown

ONE = {"INSERT": 1}
DELTAS = "queue_count_deltas"

LIFE: dict[str, Changes] = {
    "enqueue": {"jobs": ONE, DELTAS: ONE, "transitions": ONE},
    "claim": {"attempts": ONE, "jobs": {"UPDATE": 1}, DELTAS: {"INSERT": 2}, "transitions": ONE},
    # No transition row: the attempt's start is the history's entry (``store.history``).
    "start": {"attempts": {"UPDATE": 1}, "jobs": {"UPDATE": 1}, DELTAS: {"INSERT": 2}},
    "result (succeeded)": {
        "attempts": {"UPDATE": 1},
        "jobs": {"UPDATE": 1},
        DELTAS: {"INSERT": 2},
        "transitions": ONE,
    },
    "count fold (background)": {
        DELTAS: {"DELETE": 7},
        "queue_counts": {"UPDATE": 1},
        "queue_finished": {"UPDATE": 1},
    },
}
"""One job enqueued with no worker waiting, then claimed, started and succeeded, each step
a transaction of its own, and the background pass that folds the count deltas."""


@pytest.fixture
def counted(unmigrated_url: str) -> Iterator[tuple[Harness, RowChanges]]:
    store = Store.open(unmigrated_url, create=True)
    changes = RowChanges(unmigrated_url)
    harness = Harness.build(store, FakeClock(), CoordinatorConfig())
    harness.enqueue(queue=QUEUE)  # the queue exists, as it does on the hot path
    harness.report(harness.run().attempt_id)
    harness.store.transact(lambda tx: tx.fold_queue_counts(harness.clock.now_ms()), what="a test")
    changes.take()
    yield harness, changes
    changes.close()
    store.close()


def _step(changes: RowChanges, steps: dict[str, Changes], name: str) -> None:
    written, transactions = changes.take()
    assert transactions in (None, 1), (name, transactions)  # one transaction a step
    steps[name] = written


@pytest.mark.perf
def test_one_job_writes_these_rows_in_these_transactions(counted: tuple[Harness, RowChanges]) -> None:
    harness, changes = counted
    steps: dict[str, Changes] = {}
    job_id = harness.enqueue(queue=QUEUE)
    _step(changes, steps, "enqueue")
    claimed = harness.claim_one(job_id)
    _step(changes, steps, "claim")
    assert harness.start(claimed.attempt_id).granted
    _step(changes, steps, "start")
    assert harness.report(claimed.attempt_id).accepted
    _step(changes, steps, "result (succeeded)")
    harness.store.transact(lambda tx: tx.fold_queue_counts(harness.clock.now_ms()), what="a test")
    _step(changes, steps, "count fold (background)")
    assert steps == LIFE, as_markdown(steps)


@pytest.mark.perf
def test_an_enqueue_that_claims_for_a_waiting_worker_writes_both_in_one_transaction(
    counted: tuple[Harness, RowChanges],
) -> None:
    harness, changes = counted
    claims = [ClaimRequest(WORKER, (QUEUE,), (WIRE,), 1, LEASE_MS)]
    enqueued, answers = harness.enqueue_claiming([NewJobSpec(WIRE, b"{}", queue=QUEUE)], claims)
    assert [claimed.job.id for claimed in answers.claims[0]] == [enqueued[0].job_id]
    written, transactions = changes.take()
    assert transactions in (None, 1)
    # The job is inserted, then claimed: the claim reads the new row from the database
    # and updates it, on both engines.
    jobs_written = {"INSERT": 1, "UPDATE": 1}
    expected = {"attempts": ONE, "jobs": jobs_written, DELTAS: ONE, "transitions": {"INSERT": 2}}
    assert written == expected, as_markdown({"enqueue + claim": written})
