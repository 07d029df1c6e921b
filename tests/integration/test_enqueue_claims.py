"""A worker waiting for work gets a new job in the enqueue's own transaction (the writer's
batch the call is an item of): when the Enqueue call returns, the job is already reserved
for it, without another dispatcher round. The
queue's controls hold there too, and credit not used goes back to the session. The claims
go out only once the transaction has committed: a transaction tried again or failed
hands out nothing of what it claimed, and the worker's start goes in a worker batch."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coordinator.domain.states import JobState
from coordinator.process import RunningCoordinator
from coordinator.service import batch as batch_module
from coordinator.store import StoreError, Tx
from coordinator.store.errors import WriteConflict
from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from tests.support import eventually
from worker_sdk import AsyncClient

WIRE = "chaos.task"


@pytest.fixture
async def running(database_url: str) -> AsyncIterator[RunningCoordinator]:
    async with coordinator_without_wake_ups(database_url) as coordinator:
        yield coordinator


async def _waiting_worker(running: RunningCoordinator) -> tuple[RawWorker, int]:
    """A worker with credit for two jobs and nothing claimable: it waits."""
    worker = RawWorker(running.target, "waiting-worker", [WIRE], capacity=2)
    await worker.next("welcome")
    worker.send(credit=worker_credit(2))
    dispatcher = running.app.dispatcher
    await eventually(lambda: sum(s.credit for s in dispatcher.sessions) == 2, what="the credit to arrive")
    # The credit's own claim round found nothing; from now on no round runs by itself.
    await eventually(lambda: dispatcher.claim_rounds >= 1, what="the credit's claim round")
    return worker, dispatcher.claim_rounds


def worker_credit(count: int) -> object:
    from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

    return pb.Credit(count=count)


async def test_an_enqueue_claims_for_a_waiting_worker_in_its_own_transaction(
    running: RunningCoordinator,
) -> None:
    worker, rounds = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            job_id = await client.enqueue(Task("at-once", 1))
            # Reserved when the call returns: the batch that wrote the enqueue claimed it.
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RESERVED
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
            if not running.app.store.postgres:  # (PostgreSQL's NOTIFY wakes a round anyway)
                assert running.app.dispatcher.claim_rounds == rounds + 1  # that batch's, no other
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (1, 0), what="one used, one back")
    finally:
        await worker.close()


async def test_a_paused_queue_is_not_claimed_by_an_enqueue_and_the_credit_comes_back(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            # A job due in an hour makes the queue known without anything to claim.
            await client.enqueue(Task("later", 1), run_at=datetime.now(UTC) + timedelta(hours=1))
            await client.pause_queue("default")
            job_id = await client.enqueue(Task("held", 1))
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.AVAILABLE
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (2, 0), what="the credit back")
            await client.resume_queue("default")
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
    finally:
        await worker.close()


async def test_a_refused_enqueue_gives_the_reserved_credit_back(running: RunningCoordinator) -> None:
    worker, _ = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            with pytest.raises(Exception, match="queue"):
                await client.enqueue(Task("bad", 1), queue="not a queue name!")
        [session] = running.app.dispatcher.sessions
        await eventually(lambda: (session.credit, session.reserved) == (2, 0), what="the credit back")
    finally:
        await worker.close()


def _pb() -> Any:
    from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

    return pb


@contextlib.contextmanager
def _before_the_enqueues_commit(running: RunningCoordinator, action: Callable[[], None]) -> Iterator[None]:
    """Runs ``action`` on the writer just before the commit of the next batch that
    writes an enqueue (once). Only that transaction's: another one (a count fold, a claim
    round) may commit meanwhile and must not take it."""
    original_write_items, original_before_commit = batch_module.write_items, Tx.before_commit
    claiming_transactions: set[int] = set()
    pending = [action]

    def write_items(tx: Tx, checked: Any, now_ms: int) -> Any:
        claiming_transactions.add(id(tx))
        return original_write_items(tx, checked, now_ms)

    def before_commit(tx: Tx) -> None:
        if id(tx) in claiming_transactions and pending:
            pending.pop()()
        original_before_commit(tx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_module, "write_items", write_items)
        patch.setattr(Tx, "before_commit", before_commit)
        yield


def _assignments_made(running: RunningCoordinator, committed: threading.Event) -> list[bool]:
    """For each assignment the only session is handed, whether ``committed`` was set by
    then."""
    [session] = running.app.dispatcher.sessions
    assign, seen = session.assign, []

    def recording(claimed: Any) -> None:
        seen.append(committed.is_set())
        assign(claimed)

    session.assign = recording  # type: ignore[method-assign]
    return seen


async def test_an_enqueues_claim_goes_out_only_once_its_transaction_committed(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    committing, commit = threading.Event(), threading.Event()
    made = _assignments_made(running, commit)

    def hold_the_commit() -> None:
        committing.set()
        assert commit.wait(20), "the test never let the commit go"

    try:
        async with AsyncClient(running.target) as client:
            with _before_the_enqueues_commit(running, hold_the_commit):
                enqueue = asyncio.create_task(client.enqueue(Task("after", 1)))
                await eventually(committing.is_set, what="the writer at the commit")
                assert made == [] and not enqueue.done()
                commit.set()
                job_id = await enqueue
            assignment: Any = await worker.next("assignment")
            assert (assignment.job_id, made) == (job_id, [True])
            answer = await worker.start(assignment.attempt_id)
            assert (answer.granted, answer.execution_number) == (True, 1)
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        commit.set()
        await worker.close()


async def test_an_enqueue_tried_again_hands_out_only_the_claims_of_the_try_that_committed(
    running: RunningCoordinator,
) -> None:
    """A transaction that conflicts is run again whole, its claims with it: the worker
    gets the claim the committed try made, and no other attempt exists."""
    worker, _ = await _waiting_worker(running)

    def conflict() -> None:
        raise WriteConflict("a conflict made by the test")

    try:
        async with AsyncClient(running.target) as client:
            with _before_the_enqueues_commit(running, conflict):
                job_id = await client.enqueue(Task("retried", 1))
            assignment: Any = await worker.next("assignment")
            assert assignment.job_id == job_id
            assert [a.id for a in running.app.store.list_attempts(job_id)] == [assignment.attempt_id]
            assert (await worker.start(assignment.attempt_id)).granted
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (1, 0), what="one used, one back")
    finally:
        await worker.close()


async def test_an_enqueue_that_fails_hands_out_nothing(running: RunningCoordinator) -> None:
    """The enqueue's transaction is a worker batch: when it fails, nothing it claimed is
    handed out, and the streams it claimed for close as for any failed batch (their
    workers reconnect); a worker waiting then gets the next job."""
    worker, _ = await _waiting_worker(running)
    made = _assignments_made(running, threading.Event())

    def fail() -> None:
        raise StoreError("a failure made by the test")

    try:
        async with AsyncClient(running.target) as client:
            enqueue_fails = pytest.raises(Exception, match=r"unavailable|failure")
            with _before_the_enqueues_commit(running, fail), enqueue_fails:
                await client.enqueue(Task("failed", 1))
            assert made == []
            await eventually(lambda: not running.app.dispatcher.sessions, what="the stream closed")
            assert (
                running.app.store.list_jobs(queue=None, state=None, wire_name=None, after_id=None, limit=5)
                == []
            )
            again, _ = await _waiting_worker(running)
            try:
                job_id = await client.enqueue(Task("next", 1))
                assignment: Any = await again.next("assignment")
                assert assignment.job_id == job_id
            finally:
                await again.close()
    finally:
        await worker.close()


async def test_a_start_of_an_enqueues_claim_from_another_stream_is_refused(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    intruder = RawWorker(running.target, "another-worker", [WIRE])
    await intruder.next("welcome")
    try:
        async with AsyncClient(running.target) as client:
            job_id = await client.enqueue(Task("held", 1))
            assignment: Any = await worker.next("assignment")
            refused = await intruder.start(assignment.attempt_id)
            assert (refused.granted, refused.reason) == (False, "attempt held by another worker")
            assert (await worker.start(assignment.attempt_id)).granted
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        await intruder.close()
        await worker.close()
