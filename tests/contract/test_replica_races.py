"""Two coordinators on one PostgreSQL act on the same attempt at once (a worker's
message resent through another replica, a release racing a late start): the second
batch's read waits on the first's row locks and then sees what the first committed,
for the attempt as for its job (``Tx.attempts_with_their_jobs``). SQLite has one
writer and one coordinator, so only PostgreSQL can race.

Each test holds the first replica's transaction open just before its commit until the
second replica's read is seen waiting on a lock, so the race is the same every run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

from coordinator.domain.states import JobState, Outcome
from coordinator.store import Store
from tests.support.polling import wait_until

from .harness import WAITING_ON_A_LOCK, Harness

pytestmark = pytest.mark.postgres


def _race(first: Callable[[], Any], first_store: Store, second: Callable[[], Any]) -> tuple[Any, Any]:
    """Runs ``first`` in a thread whose commit waits until ``second``, run here, waits on
    a lock; returns both answers."""
    holding, given_up = threading.Event(), threading.Event()
    probe = create_engine(first_store.url)

    def hold_the_commit(conn: Any) -> None:
        holding.set()
        with probe.connect() as watcher:
            wait_until(
                lambda: given_up.is_set() or watcher.execute(text(WAITING_ON_A_LOCK)).scalar(),
                interval=0.01,
                what="the other replica's read to wait on the locked rows",
            )

    answers: list[Any] = []
    event.listen(first_store._write_engine, "commit", hold_the_commit)
    try:
        thread = threading.Thread(target=lambda: answers.append(first()))
        thread.start()
        assert holding.wait(20), "the first replica's transaction never reached its commit"
        try:
            second_answer = second()
        finally:
            given_up.set()  # the first commits now, whatever the second did
            thread.join(20)
    finally:
        event.remove(first_store._write_engine, "commit", hold_the_commit)
        probe.dispose()
    assert answers, "the first replica's batch did not finish"
    return answers[0], second_answer


def test_a_result_resent_through_another_replica_sees_the_first_one_committed(
    replicas: tuple[Harness, Harness],
) -> None:
    one, other = replicas
    claimed = one.run(one.enqueue())
    attempt_id = claimed.attempt_id

    accepted, resent = _race(
        lambda: one.report(attempt_id, Outcome.SUCCEEDED),
        one.store,
        lambda: other.report(attempt_id, Outcome.PERMANENT_FAILURE, error_code="E", message="resent late"),
    )

    assert accepted.accepted and accepted.job_state is JobState.SUCCEEDED
    # The second read waited on the locks, then saw the attempt reported: R-14's first
    # answer again, not a write conflict against a row it had read open.
    assert (resent.accepted, resent.job_state, resent.error) == (True, JobState.SUCCEEDED, None)
    assert one.job(claimed.job.id).state is JobState.SUCCEEDED
    assert [a.outcome for a in one.attempts(claimed.job.id)] == [Outcome.SUCCEEDED]


def test_a_start_racing_a_release_on_another_replica_is_refused(replicas: tuple[Harness, Harness]) -> None:
    one, other = replicas
    claimed = one.claim_one(one.enqueue())
    attempt_id = claimed.attempt_id

    _, start = _race(lambda: one.release(attempt_id), one.store, lambda: other.start(attempt_id))

    assert not start.granted
    assert start.reason == "superseded attempt"  # the job given back no longer names it
    job = one.job(claimed.job.id)
    assert (job.state, job.executions) == (JobState.AVAILABLE, 0)
    [attempt] = one.attempts(claimed.job.id)
    assert attempt.started_at_ms is None and attempt.outcome is not None
