"""Enqueue calls as items of a worker batch (``service.enqueue_items``): many calls and the
worker messages pending with them commit in one transaction; an item that fails, before
writing or after, fails alone and leaves nothing of itself, and the others commit."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState
from coordinator.errors import AlreadyExists, InvalidArgument, NotFound
from coordinator.service.work import ClaimRequest, EnqueueItem, WorkBatch
from coordinator.store import Tx
from coordinator.store.errors import DuplicateKey

from .harness import LEASE_MS, QUEUE, WIRE, WORKER, Harness

TAKEN_ID = "0190a0b0-0000-7000-8000-000000000001"
MISSING_PARENT = "0190a0b0-0000-7000-8000-0000000000ff"


def _item(*specs: NewJobSpec) -> EnqueueItem:
    return EnqueueItem(list(specs))


def _spec(**fields: Any) -> NewJobSpec:
    return NewJobSpec(WIRE, b"{}", queue=QUEUE, **fields)


def _transactions(harness: Harness) -> list[float]:
    """Every write transaction of ``harness``'s store from now on."""
    seen: list[float] = []
    harness.store.on_transaction = seen.append
    return seen


def test_enqueue_calls_commit_in_one_transaction_with_the_batchs_claims(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE)  # the queue exists; its job is claimed first
    transactions = _transactions(harness)
    items = [_item(_spec()), _item(_spec(), _spec(idempotency_key="k")), _item(_spec(priority=5))]
    claim = ClaimRequest(WORKER, (QUEUE,), (WIRE,), 10, LEASE_MS)
    answers = harness.ops.process(WorkBatch(enqueues=items, claims=[claim]))
    assert len(transactions) == 1
    outcomes = answers.enqueued
    assert [len(outcome) for outcome in outcomes if isinstance(outcome, list)] == [1, 2, 1]
    new_ids = {job.job_id for outcome in outcomes if isinstance(outcome, list) for job in outcome}
    claimed = {item.job.id for item in answers.claims[0]}
    assert new_ids < claimed and len(claimed) == 5  # the batch's claims took the new jobs
    assert all(harness.job(job_id).state is JobState.RESERVED for job_id in new_ids)


def test_a_bad_item_fails_alone_and_the_others_commit(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE, job_id=TAKEN_ID)
    before = harness.count_jobs()
    items = [
        _item(_spec(idempotency_key="first")),
        _item(_spec(), _spec(parent_ids=(MISSING_PARENT,))),  # a parent that is not there
        _item(_spec(job_id=TAKEN_ID)),  # an ID taken already
        _item(NewJobSpec("", b"{}", queue=QUEUE)),  # no wire name: refused by its checks
        _item(_spec(), _spec(unique_key="u")),
    ]
    outcomes = harness.ops.process(WorkBatch(enqueues=items)).enqueued
    assert isinstance(outcomes[1], NotFound) and isinstance(outcomes[2], AlreadyExists)
    assert isinstance(outcomes[3], InvalidArgument)
    good = [outcomes[0], outcomes[4]]
    assert all(isinstance(outcome, list) for outcome in good)
    written = [job for outcome in good if isinstance(outcome, list) for job in outcome]
    assert all(harness.job(job.job_id).state is JobState.AVAILABLE for job in written)
    assert harness.count_jobs() == before + 3  # nothing of the failed items, counts included


def test_an_item_that_fails_after_writing_rolls_back_to_its_savepoint(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the item's jobs were written (a key another transaction took, on
    PostgreSQL) takes back its writes and its counts only; tried under a new savepoint
    each time, it fails alone when it keeps failing."""
    original = Tx.insert_dependencies
    failing_parent = harness.enqueue(queue=QUEUE)

    def insert_dependencies(tx: Tx, edges: Any) -> None:
        original(tx, edges)
        if any(edge.parent_id == failing_parent for edge in edges):
            raise DuplicateKey("a key taken by the test")

    monkeypatch.setattr(Tx, "insert_dependencies", insert_dependencies)
    before = harness.count_jobs()
    items = [_item(_spec()), _item(_spec(), _spec(parent_ids=(failing_parent,))), _item(_spec())]
    outcomes = harness.ops.process(WorkBatch(enqueues=items)).enqueued
    assert isinstance(outcomes[1], DuplicateKey)
    assert harness.count_jobs() == before + 2
    assert len(harness.all_jobs()) == before + 2


def test_an_item_whose_key_was_taken_meanwhile_is_tried_again_under_a_new_savepoint(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key taken by a concurrent enqueue (PostgreSQL) fails the item's insert; it is
    tried again, as a whole enqueue transaction was, and its second try reads the key
    afresh (R-14: the job that took it, when that one committed; here nobody did)."""
    original = Tx.insert_jobs
    raced: list[bool] = []

    def insert_jobs(tx: Tx, new_jobs: Any, now_ms: int, **kwargs: Any) -> None:
        original(tx, new_jobs, now_ms, **kwargs)
        if not raced and any(job.idempotency_key == "raced" for job in new_jobs):
            raced.append(True)
            # The same rows again: the database's own unique violation (on PostgreSQL it
            # aborts the transaction until the rollback to the savepoint).
            original(tx, new_jobs, now_ms, **kwargs)

    monkeypatch.setattr(Tx, "insert_jobs", insert_jobs)
    before = harness.count_jobs()
    items = [_item(_spec(idempotency_key="raced")), _item(_spec())]
    first, second = harness.ops.process(WorkBatch(enqueues=items)).enqueued
    assert raced == [True]
    assert isinstance(first, list) and isinstance(second, list)
    assert [job.existing for job in first + second] == [False, False]
    assert harness.count_jobs() == before + 2  # the first try's job and counts were undone
