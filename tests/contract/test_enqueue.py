"""Enqueue: initial state, R-3 settings resolved and copied, R-14 idempotency keys,
all-or-nothing batches (docs/limits.md)."""

from __future__ import annotations

import pytest

from coordinator.domain.records import NewJobSpec
from coordinator.domain.settings import JobSettings, SettingsLayer
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument

from .harness import QUEUE, SECOND, WIRE, Harness


def test_enqueue_creates_an_available_job_with_library_defaults(harness: Harness) -> None:
    now = harness.clock.now_ms()
    [enqueued] = harness.enqueue_specs([NewJobSpec(WIRE, b'{"order": 1}', payload_version=2, priority=7)])

    assert enqueued.state is JobState.AVAILABLE
    assert enqueued.existing is False
    job = harness.job(enqueued.job_id)
    assert job.state is JobState.AVAILABLE
    assert (job.wire_name, job.queue, job.priority) == (WIRE, QUEUE, 7)
    assert (job.payload, job.payload_version) == (b'{"order": 1}', 2)
    assert job.run_at_ms == now
    assert job.created_at_ms == job.updated_at_ms == now
    assert (job.generation, job.executions, job.unstarted_streak) == (1, 0, 0)
    assert job.current_attempt_id is None and job.lease_expires_at_ms is None
    assert job.idempotency_key is None and job.output is None and job.finished_at_ms is None
    assert job.settings == JobSettings()
    [transition] = harness.transitions(job.id)
    assert (transition["from_state"], transition["to_state"], transition["reason"]) == (
        None,
        "available",
        "enqueued",
    )
    assert transition["at_ms"] == now
    assert harness.attempts(job.id) == []


def test_enqueue_with_a_future_run_at_is_scheduled(harness: Harness) -> None:
    run_at = harness.clock.now_ms() + 90 * SECOND
    [enqueued] = harness.enqueue_specs([NewJobSpec(WIRE, b"", run_at_ms=run_at)])

    assert enqueued.state is JobState.SCHEDULED
    job = harness.job(enqueued.job_id)
    assert (job.state, job.run_at_ms) == (JobState.SCHEDULED, run_at)


def test_enqueue_with_a_past_run_at_is_available_at_that_time(harness: Harness) -> None:
    run_at = harness.clock.now_ms() - 5 * SECOND
    job = harness.job(harness.enqueue(run_at_ms=run_at))

    assert (job.state, job.run_at_ms) == (JobState.AVAILABLE, run_at)


def test_r3_request_layer_wins_over_coordinator_job_defaults(harness: Harness) -> None:
    """R-3: library default < JobDefaults (configuration) < the request's layer."""
    configured = harness.with_config(
        job_defaults=SettingsLayer(
            max_executions=4,
            retry_initial_delay_ms=2 * SECOND,
            execution_timeout_ms=600 * SECOND,
            max_unstarted_abandonments=9,
        )
    )
    request = SettingsLayer(max_executions=7, clear_execution_timeout=True, retry_max_delay_ms=120 * SECOND)

    job = configured.job(configured.enqueue(settings=request))

    assert job.settings == JobSettings(
        max_executions=7,  # request
        retry_initial_delay_ms=2 * SECOND,  # JobDefaults
        retry_max_delay_ms=120 * SECOND,  # request
        execution_timeout_ms=None,  # request removes the JobDefaults timeout
        max_unstarted_abandonments=9,  # JobDefaults
        unstarted_initial_delay_ms=1 * SECOND,  # library
        unstarted_max_delay_ms=30 * SECOND,  # library
    )
    plain = configured.job(configured.enqueue())
    assert (plain.max_executions, plain.execution_timeout_ms) == (4, 600 * SECOND)


def test_r3_later_configuration_changes_never_change_queued_jobs(harness: Harness) -> None:
    """R-3: settings are copied at enqueue; a coordinator restarted with other JobDefaults
    keeps the stored values and applies them."""
    before = harness.with_config(job_defaults=SettingsLayer(max_executions=1, retry_max_delay_ms=7 * SECOND))
    job_id = before.enqueue()
    harness.clock.advance(1)  # the newer job sorts after it in claim order

    after = harness.with_config(job_defaults=SettingsLayer(max_executions=50, retry_max_delay_ms=9 * SECOND))
    newer_id = after.enqueue()

    assert after.job(job_id).settings == JobSettings(max_executions=1, retry_max_delay_ms=7 * SECOND)
    assert after.job(newer_id).settings == JobSettings(max_executions=50, retry_max_delay_ms=9 * SECOND)
    # The stored budget of one execution is what the lifecycle applies under the new config.
    claimed = after.run(job_id, wire_names=(WIRE,))
    answer = after.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE, error_code="Boom")
    assert (answer.job_state, answer.retry_delay_ms) == (JobState.FAILED, None)
    assert after.job(job_id).state is JobState.FAILED


def test_r14_idempotency_key_returns_the_existing_job_across_calls(harness: Harness) -> None:
    first = harness.enqueue_specs([NewJobSpec(WIRE, b"one", idempotency_key="order-1")])[0]
    harness.clock.advance(SECOND)
    second = harness.enqueue_specs([NewJobSpec(WIRE, b"two", idempotency_key="order-1")])[0]

    assert first.existing is False
    assert (second.job_id, second.existing) == (first.job_id, True)
    assert harness.count_jobs() == 1
    job = harness.job(first.job_id)
    assert (job.payload, job.idempotency_key) == (b"one", "order-1")


def test_r14_idempotency_key_answers_with_the_existing_jobs_current_state(harness: Harness) -> None:
    job_id = harness.enqueue(idempotency_key="order-2")
    harness.claim_one(job_id)

    [again] = harness.enqueue_specs([NewJobSpec(WIRE, b"", idempotency_key="order-2")])

    assert (again.job_id, again.state, again.existing) == (job_id, JobState.RESERVED, True)
    assert harness.count_jobs() == 1


def test_r14_idempotency_key_twice_in_one_batch_creates_one_job(harness: Harness) -> None:
    results = harness.enqueue_specs(
        [
            NewJobSpec(WIRE, b"a", idempotency_key="k-1"),
            NewJobSpec(WIRE, b"b"),
            NewJobSpec(WIRE, b"c", idempotency_key="k-1"),
        ]
    )

    assert [r.existing for r in results] == [False, False, True]
    assert results[2].job_id == results[0].job_id
    assert results[1].job_id != results[0].job_id
    assert harness.count_jobs() == 2
    assert harness.job(results[0].job_id).payload == b"a"


def test_jobs_without_idempotency_keys_are_never_merged(harness: Harness) -> None:
    results = harness.enqueue_specs([NewJobSpec(WIRE, b"x", idempotency_key=""), NewJobSpec(WIRE, b"x")])

    assert results[0].job_id != results[1].job_id
    assert harness.count_jobs() == 2
    assert harness.job(results[0].job_id).idempotency_key is None


BAD_JOBS = {
    "wire name with a space": (NewJobSpec("bad name", b""), "jobs[1].wire_name"),
    "empty wire name": (NewJobSpec("", b""), "jobs[1].wire_name"),
    "wire name over 128 UTF-16 units": (NewJobSpec("𝒜" * 65, b""), "jobs[1].wire_name"),
    "bad queue": (NewJobSpec(WIRE, b"", queue="a/b"), "jobs[1].queue"),
    "max_executions 0": (
        NewJobSpec(WIRE, b"", settings=SettingsLayer(max_executions=0)),
        "jobs[1].settings.max_executions",
    ),
    "max_executions 101": (
        NewJobSpec(WIRE, b"", settings=SettingsLayer(max_executions=101)),
        "jobs[1].settings.max_executions",
    ),
    "retry initial over max": (
        NewJobSpec(WIRE, b"", settings=SettingsLayer(retry_initial_delay_ms=90 * SECOND)),
        "jobs[1].settings.retry_initial_delay",
    ),
    "retry max over 24 h": (
        NewJobSpec(WIRE, b"", settings=SettingsLayer(retry_max_delay_ms=24 * 3_600 * SECOND + 1)),
        "jobs[1].settings.retry_max_delay",
    ),
    "execution timeout over 30 days": (
        NewJobSpec(WIRE, b"", settings=SettingsLayer(execution_timeout_ms=30 * 86_400 * SECOND + 1)),
        "jobs[1].settings.execution_timeout",
    ),
    "max_unstarted_abandonments 0": (
        NewJobSpec(WIRE, b"", settings=SettingsLayer(max_unstarted_abandonments=0)),
        "jobs[1].settings.max_unstarted_abandonments",
    ),
    "idempotency key over 256 characters": (
        NewJobSpec(WIRE, b"", idempotency_key="k" * 257),
        "jobs[1].idempotency_key",
    ),
    "idempotency key with a NUL": (
        NewJobSpec(WIRE, b"", idempotency_key="order\x00-1"),
        "jobs[1].idempotency_key",
    ),
}


@pytest.mark.parametrize(("bad", "field"), list(BAD_JOBS.values()), ids=list(BAD_JOBS))
def test_s5_batch_with_one_invalid_job_creates_nothing(harness: Harness, bad: NewJobSpec, field: str) -> None:
    """docs/limits.md: a batch is all-or-nothing; the error names the bad job's index and field."""
    harness.enqueue()  # something already there, to count against
    before = harness.count_jobs()

    with pytest.raises(InvalidArgument) as raised:
        harness.enqueue_specs(
            [NewJobSpec(WIRE, b"ok", idempotency_key="fresh"), bad, NewJobSpec(WIRE, b"ok")]
        )

    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert harness.count_jobs() == before
    # Nothing of the batch was kept, not even the valid job's idempotency key.
    [again] = harness.enqueue_specs([NewJobSpec(WIRE, b"", idempotency_key="fresh")])
    assert again.existing is False


def test_s5_wire_name_of_exactly_128_utf16_units_is_accepted(harness: Harness) -> None:
    name = "𝒜" * 64  # outside the BMP: two UTF-16 code units each
    assert harness.job(harness.enqueue(name)).wire_name == name


def test_s5_idempotency_key_of_256_characters_is_accepted(harness: Harness) -> None:
    key = "é" * 256
    job_id = harness.enqueue(idempotency_key=key)
    assert harness.job(job_id).idempotency_key == key
    assert harness.enqueue_specs([NewJobSpec(WIRE, b"", idempotency_key=key)])[0].existing is True


def test_an_empty_batch_is_refused(harness: Harness) -> None:
    with pytest.raises(InvalidArgument):
        harness.enqueue_specs([])
    assert harness.count_jobs() == 0


@pytest.mark.postgres
def test_r14_an_enqueue_racing_another_with_the_same_key_returns_the_winner(postgres_url: str) -> None:
    """The loser of an idempotency-key race hits the unique index, looks again and
    returns the job that won (PostgreSQL: two coordinators can race; SQLite has one)."""
    import random
    import threading

    from sqlalchemy import create_engine, text

    from coordinator.config import CoordinatorConfig
    from coordinator.domain.clock import FakeClock
    from coordinator.service.jobs import JobsService
    from coordinator.store import Store
    from tests.conftest import _truncate
    from tests.support import wait_until

    _truncate(postgres_url)
    first, second = Store.open(postgres_url), Store.open(postgres_url)
    clock = FakeClock()
    winner_service = JobsService(first, clock, CoordinatorConfig(), random.Random(1))
    loser_service = JobsService(second, clock, CoordinatorConfig(), random.Random(2))
    spec = NewJobSpec(WIRE, b"{}", idempotency_key="race-1")
    outcome: list[object] = []
    try:
        with first.write() as tx:
            winner = winner_service._new_job(0, spec, clock.now_ms()).record
            tx.insert_jobs([winner], clock.now_ms())  # not committed yet
            loser = threading.Thread(target=lambda: outcome.append(loser_service.enqueue([spec])))
            loser.start()
            # Commit only once the loser's insert waits on our uncommitted key.
            probe = create_engine(postgres_url)
            with probe.connect() as conn:
                waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                wait_until(
                    lambda: conn.execute(text(waiting)).scalar(),
                    interval=0.01,
                    what="the racing insert to wait on the key",
                )
            probe.dispose()
        loser.join(20)
    finally:
        first.close()
        second.close()

    [enqueued] = outcome[0]  # type: ignore[misc]
    assert (enqueued.job_id, enqueued.existing) == (winner.id, True)


def test_a_broken_constraint_is_not_reported_as_a_taken_key_nor_tried_again(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a unique key hit by another write is a race (``DuplicateKey``, tried again):
    a job the internal API gives no concurrency key breaks the column's NOT NULL, which
    is reported as the database error it is, once, and writes nothing."""
    from coordinator.store import DuplicateKey, StoreError

    before = harness.count_jobs()
    spec = NewJobSpec(WIRE, b"{}", queue=QUEUE, concurrency_key=None)  # type: ignore[arg-type]
    with caplog.at_level("INFO", logger="coordinator.store"), pytest.raises(StoreError) as raised:
        harness.jobs.enqueue([spec])
    assert not isinstance(raised.value, DuplicateKey)
    assert not [r for r in caplog.records if "write conflict" in r.getMessage()]
    assert "concurrency_key" in caplog.text  # the log names what broke
    assert harness.count_jobs() == before


def test_an_idempotency_key_taken_meanwhile_is_still_a_taken_key(harness: Harness) -> None:
    """The unique index's hit stays ``DuplicateKey``: the insert tells the race apart."""
    from coordinator.domain.evolve import evolve
    from coordinator.store import DuplicateKey

    harness.enqueue(queue=QUEUE, idempotency_key="taken")
    [row] = [job for job in harness.all_jobs() if job.idempotency_key == "taken"]
    copy = NewJobSpec(WIRE, b"{}", queue=QUEUE)
    new = harness.jobs.checked_batch([copy], harness.clock.now_ms())[0][0].record
    clash = evolve(new, idempotency_key="taken")

    def insert(tx):  # type: ignore[no-untyped-def]
        tx.insert_jobs([clash], harness.clock.now_ms())

    with pytest.raises(DuplicateKey):
        harness.store.transact(insert, what="a test")
    assert [job.id for job in harness.all_jobs() if job.idempotency_key == "taken"] == [row.id]
