"""Retention and purge (R-19) on both engines: terminal jobs are removed by age, per
state, with their attempts, history and own dependency rows, in batches of at most
``max_purge_batch``; open jobs never; children keep (and use) the copies of a purged
parent's output. The loop runs through the facade with a fake clock."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.pool import NullPool

from coordinator.app import Coordinator
from coordinator.config import ConfigError, CoordinatorConfig
from coordinator.domain.access import Actor, Principal, Scope
from coordinator.domain.clock import FakeClock
from coordinator.domain.states import TERMINAL_STATES, JobState, Outcome
from coordinator.errors import InvalidArgument
from coordinator.scheduler.retention import Retention, purge_all
from coordinator.service.executors import Executors
from coordinator.service.manage import ManagementService
from coordinator.service.retention import RetentionService
from coordinator.store import Store
from coordinator.store.schema import attempts, dependencies, jobs, transitions
from tests.support import eventually

from .harness import SECOND, Harness

MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
OPERATOR = Actor(Principal("0123456789abcdef", "ops", frozenset({Scope.ADMIN})), "ipv4:10.1.2.3:5")
AGES = {JobState.SUCCEEDED: 1 * HOUR, JobState.FAILED: 2 * HOUR, JobState.CANCELLED: 3 * HOUR}


# -- making jobs -------------------------------------------------------------------------


def _succeed(harness: Harness, job_id: str, output: bytes = b"out") -> None:
    claimed = harness.run(job_id)
    assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=output).accepted


def _fail(harness: Harness, job_id: str) -> None:
    claimed = harness.run(job_id)
    assert harness.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE, error_code="Boom").accepted


def _cancel(harness: Harness, job_id: str) -> None:
    ManagementService(harness.store, harness.clock).cancel(job_id, OPERATOR)


def _finished(harness: Harness, state: JobState, queue: str) -> str:
    """A job of its own queue that ends in ``state`` now, with an attempt when it ran."""
    job_id = harness.enqueue(queue=queue)
    {JobState.SUCCEEDED: _succeed, JobState.FAILED: _fail, JobState.CANCELLED: _cancel}[state](
        harness, job_id
    )
    assert harness.job(job_id).state is state
    return job_id


def _open_jobs(harness: Harness) -> dict[JobState, str]:
    """One job in every state that is not terminal."""
    later = harness.clock.now_ms() + 365 * DAY
    made = {
        JobState.AVAILABLE: harness.enqueue(queue="open-available"),
        JobState.SCHEDULED: harness.enqueue(queue="open-scheduled", run_at_ms=later),
    }
    reserved, running, parent = (harness.enqueue(queue=q) for q in ("open-reserved", "open-running", "p"))
    harness.claim_one(reserved)
    harness.run(running)
    made[JobState.RESERVED], made[JobState.RUNNING] = reserved, running
    made[JobState.WAITING] = harness.enqueue(queue="open-waiting", parent_ids=(parent,))
    for state, job_id in made.items():
        assert harness.job(job_id).state is state
    assert set(made) == {state for state in JobState if not state.terminal}
    return made


# -- purging ---------------------------------------------------------------------------


def _purge(harness: Harness, state: JobState, older_than_ms: int) -> int:
    """What the loop does for one state: batch after batch until one is short."""
    service = RetentionService(harness.store, harness.clock)
    cutoff = service.cutoff_ms(older_than_ms)
    total = 0
    while True:
        removed = service.purge_batch(state, cutoff)
        total += removed
        if removed < service.batch_size:
            return total


def _retention_pass(harness: Harness) -> dict[JobState, int]:
    return {state: _purge(harness, state, age) for state, age in AGES.items()}


def _exists(harness: Harness, job_id: str) -> bool:
    return harness.store.get_job(job_id) is not None


@pytest.fixture
def sql(harness: Harness) -> Iterator[object]:
    engine = create_engine(harness.store.url, poolclass=NullPool)
    yield engine
    engine.dispose()


def _rows_about(engine: object, job_id: str) -> dict[str, int]:
    """How many rows of each table belong to ``job_id`` (dependencies: as the child)."""
    counts: dict[str, int] = {}
    with engine.connect() as conn:  # type: ignore[attr-defined]
        for name, table, column in (
            ("jobs", jobs, jobs.c.id),
            ("attempts", attempts, attempts.c.job_id),
            ("transitions", transitions, transitions.c.job_id),
            ("dependencies", dependencies, dependencies.c.child_id),
        ):
            counts[name] = conn.execute(
                select(func.count()).select_from(table).where(column == job_id)
            ).scalar()
    return counts


# -- the policy ------------------------------------------------------------------------


def test_each_terminal_state_is_purged_just_past_its_own_age_and_not_before(harness: Harness) -> None:
    finished_at = harness.clock.now_ms()
    old = {state: _finished(harness, state, f"old-{state}") for state in AGES}
    open_jobs = _open_jobs(harness)
    harness.clock.advance(30 * MINUTE)
    young = {state: _finished(harness, state, f"young-{state}") for state in AGES}

    # Exactly one hour after the old jobs finished: none is *older* than its age yet.
    harness.clock.advance(finished_at + HOUR - harness.clock.now_ms())
    assert _retention_pass(harness) == dict.fromkeys(AGES, 0)

    harness.clock.advance(1)  # one millisecond past the succeeded age
    assert _retention_pass(harness) == {JobState.SUCCEEDED: 1, JobState.FAILED: 0, JobState.CANCELLED: 0}
    assert not _exists(harness, old[JobState.SUCCEEDED])
    assert _exists(harness, young[JobState.SUCCEEDED])  # finished 30 minutes later

    harness.clock.advance(HOUR)  # past the failed age (2 h)
    assert _retention_pass(harness) == {JobState.SUCCEEDED: 1, JobState.FAILED: 1, JobState.CANCELLED: 0}
    assert not _exists(harness, young[JobState.SUCCEEDED])
    assert not _exists(harness, old[JobState.FAILED]) and _exists(harness, young[JobState.FAILED])
    assert _exists(harness, old[JobState.CANCELLED])

    harness.clock.advance(HOUR + 30 * MINUTE)  # past the cancelled age for both cancelled jobs
    assert _retention_pass(harness) == {JobState.SUCCEEDED: 0, JobState.FAILED: 1, JobState.CANCELLED: 2}
    assert not any(_exists(harness, job_id) for job_id in [*old.values(), *young.values()])

    harness.clock.advance(3650 * DAY)
    assert _retention_pass(harness) == dict.fromkeys(AGES, 0)
    for state, job_id in open_jobs.items():  # open jobs are never purged, however old
        assert harness.job(job_id).state is state


def test_a_purged_job_takes_its_attempts_history_and_own_dependency_rows(
    harness: Harness, sql: object
) -> None:
    parent = harness.enqueue(queue="p")
    child = harness.enqueue(queue="c", parent_ids=(parent,))
    grandchild = harness.enqueue(queue="g", parent_ids=(child,))
    _succeed(harness, parent, b"parent")
    claimed = harness.run(child)
    retried = harness.report(
        claimed.attempt_id, Outcome.RETRYABLE_FAILURE, error_code="Flaky", explicit_retry_delay_ms=SECOND
    )
    assert retried.accepted
    harness.clock.advance(SECOND)
    _succeed(harness, child, b"child")
    assert len(harness.attempts(child)) == 2
    before = _rows_about(sql, child)
    assert before == {"jobs": 1, "attempts": 2, "transitions": before["transitions"], "dependencies": 1}
    assert before["transitions"] >= 5

    harness.clock.advance(DAY)
    assert _purge(harness, JobState.SUCCEEDED, HOUR) == 2  # parent and child; the grandchild waits

    for job_id in (parent, child):
        assert _rows_about(sql, job_id) == {"jobs": 0, "attempts": 0, "transitions": 0, "dependencies": 0}
    # The grandchild's row naming the purged child stays, with the child's output.
    with sql.connect() as conn:  # type: ignore[attr-defined]
        kept = conn.execute(select(dependencies).where(dependencies.c.child_id == grandchild)).all()
    assert [(r.parent_id, r.satisfied, bytes(r.parent_output)) for r in kept] == [(child, True, b"child")]
    assert harness.store.relatives(grandchild).parent_ids == (child,)
    assert dict(harness.claim_one(grandchild).parent_outputs) == {child: b"child"}


def test_a_child_of_a_purged_parent_is_still_released_with_its_output(harness: Harness) -> None:
    purged, pending = harness.enqueue(queue="a"), harness.enqueue(queue="b")
    child = harness.enqueue(queue="c", parent_ids=(purged, pending))
    _succeed(harness, purged, b"from a")
    harness.clock.advance(DAY)
    assert _purge(harness, JobState.SUCCEEDED, HOUR) == 1
    assert not _exists(harness, purged)
    assert harness.job(child).state is JobState.WAITING

    _succeed(harness, pending, b"from b")

    assert harness.job(child).state is JobState.AVAILABLE
    claimed = harness.claim_one(child)
    assert dict(claimed.parent_outputs) == {purged: b"from a", pending: b"from b"}
    assert harness.start(claimed.attempt_id).granted
    assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED).accepted


def test_a_child_of_a_purged_parent_still_fails_when_its_other_parent_fails(harness: Harness) -> None:
    purged, doomed = harness.enqueue(queue="a"), harness.enqueue(queue="b")
    child = harness.enqueue(queue="c", parent_ids=(purged, doomed))
    _succeed(harness, purged, b"from a")
    harness.clock.advance(DAY)
    assert _purge(harness, JobState.SUCCEEDED, HOUR) == 1

    _fail(harness, doomed)

    job = harness.job(child)
    assert (job.state, job.last_error_code, job.executions) == (JobState.FAILED, "parent_failed", 0)


def test_a_cancelled_child_of_a_purged_parent_is_retried_and_reads_the_output(harness: Harness) -> None:
    """A parent that succeeded and was purged counts as succeeded for a retried child."""
    parent = harness.enqueue(queue="p")
    child = harness.enqueue(queue="c", parent_ids=(parent,), run_at_ms=harness.clock.now_ms() + DAY * 2)
    _succeed(harness, parent, b"kept")
    _cancel(harness, child)
    harness.clock.advance(DAY)
    assert _purge(harness, JobState.SUCCEEDED, HOUR) == 1

    retried = ManagementService(harness.store, harness.clock).retry(child, OPERATOR)

    assert retried.job.state is JobState.AVAILABLE
    assert dict(harness.claim_one(child).parent_outputs) == {parent: b"kept"}


# -- batches ---------------------------------------------------------------------------


def test_purge_batches_are_bounded_by_max_purge_batch_each_its_own_transaction(harness: Harness) -> None:
    small = harness.with_bounds(max_purge_batch=3)
    made = []
    for i in range(10):
        made.append(_finished(small, JobState.SUCCEEDED, f"q{i}"))
        small.clock.advance(1)  # each finishes a millisecond after the one before
    survivor = _finished(small, JobState.FAILED, "other-state")
    small.clock.advance(DAY)
    service = RetentionService(small.store, small.clock)
    assert service.batch_size == 3
    cutoff = service.cutoff_ms(HOUR)

    assert service.purge_batch(JobState.SUCCEEDED, cutoff) == 3
    assert [_exists(small, job_id) for job_id in made] == [False] * 3 + [True] * 7  # oldest first

    transactions: list[float] = []
    small.store.on_transaction = transactions.append
    sizes = []
    while (removed := service.purge_batch(JobState.SUCCEEDED, cutoff)) == service.batch_size:
        sizes.append(removed)
    sizes.append(removed)

    assert sizes == [3, 3, 1] and len(transactions) == 3
    assert not any(_exists(small, job_id) for job_id in made)
    assert _exists(small, survivor)


async def test_the_loop_purges_more_than_a_batch_in_several_transactions(harness: Harness) -> None:
    small = harness.with_bounds(max_purge_batch=4)
    made = [_finished(small, JobState.CANCELLED, f"q{i}") for i in range(9)]
    small.clock.advance(DAY)
    service = RetentionService(small.store, small.clock)
    executors = Executors(postgres=small.store.postgres)
    batches: list[int] = []
    purge_batch = service.purge_batch

    def counted(state: JobState, cutoff: int, actor: Actor | None = None) -> int:
        batches.append(removed := purge_batch(state, cutoff, actor))
        return removed

    service.purge_batch = counted  # type: ignore[method-assign]
    try:
        retention = Retention(service, executors, {JobState.CANCELLED: HOUR}, interval_s=3600)
        assert await retention.run_once() == {JobState.CANCELLED: 9}
        assert batches == [4, 4, 1]
        batches.clear()
        more = [_finished(small, JobState.CANCELLED, f"r{i}") for i in range(8)]
        small.clock.advance(DAY)
        # A batch that comes back full is followed by one more, which finds none.
        assert await purge_all(service, executors, JobState.CANCELLED, service.cutoff_ms(HOUR)) == 8
        assert batches == [4, 4, 0]
    finally:
        executors.shutdown()
    assert not any(_exists(small, job_id) for job_id in [*made, *more])


# -- never an open job, bad input ------------------------------------------------------


def test_open_states_are_refused_by_the_store_and_the_service(harness: Harness) -> None:
    _open_jobs(harness)
    harness.clock.advance(3650 * DAY)
    before = harness.rows()
    service = RetentionService(harness.store, harness.clock)
    for state in JobState:
        if state.terminal:
            continue
        with pytest.raises(ValueError, match="only terminal jobs"):
            service.purge_batch(state, harness.clock.now_ms())
        with pytest.raises(ValueError, match="only terminal jobs"):
            harness.store.transact(lambda tx, s=state: tx.purge(s, harness.clock.now_ms(), 100))
    assert harness.rows() == before


def test_a_bulk_purge_removes_only_the_selected_jobs_that_are_finished(harness: Harness, sql: object) -> None:
    """``Tx.purge_selected`` (the dashboard's bulk purge): whatever IDs it is handed, a
    job not in one of the given terminal states stays, rows and queue counts alike."""
    open_jobs = _open_jobs(harness)
    failed, succeeded = _finished(harness, JobState.FAILED, "f"), _finished(harness, JobState.SUCCEEDED, "s")
    before = harness.rows()
    selected = [failed, succeeded, *open_jobs.values()]
    removed = harness.store.transact(lambda tx: tx.purge_selected(selected, (JobState.FAILED,)))
    assert removed == 1
    assert _rows_about(sql, failed) == {"jobs": 0, "attempts": 0, "transitions": 0, "dependencies": 0}
    assert all(_exists(harness, job_id) for job_id in (succeeded, *open_jobs.values()))
    after = harness.rows()
    assert [row for row in before["jobs"] if row not in after["jobs"]] == [
        row for row in before["jobs"] if row[0] == failed
    ]
    counts = {q.queue.name: q.counts for q in harness.store.queue_stats(harness.clock.now_ms())}
    assert counts["f"].get(JobState.FAILED, 0) == 0 and counts["s"][JobState.SUCCEEDED] == 1
    with pytest.raises(ValueError, match="only terminal jobs"):
        harness.store.transact(lambda tx: tx.purge_selected(selected, (JobState.AVAILABLE,)))
    assert harness.rows() == after


# -- the facade: the loop with a fake clock, an operator's purge ------------------------


@pytest.fixture
async def app(harness: Harness) -> AsyncIterator[Coordinator]:
    config = dataclasses.replace(
        harness.config,
        database_url=harness.store.url,
        retain_succeeded_ms=AGES[JobState.SUCCEEDED],
        retain_failed_ms=None,  # kept forever
        retain_cancelled_ms=AGES[JobState.CANCELLED],
        retention_interval_s=0.05,
        maintenance_interval_s=3600,
    )
    opened = await Coordinator.open(config, clock=harness.clock, store=harness.store)
    yield opened
    await opened.stop_background()
    opened.executors.shutdown()
    opened.queue_statistics.close()  # the store is the fixture's to close


async def test_the_retention_loop_purges_through_the_facade_as_the_fake_clock_moves(
    harness: Harness, app: Coordinator
) -> None:
    assert app.retention.ages == {JobState.SUCCEEDED: HOUR, JobState.CANCELLED: 3 * HOUR}
    done = {state: _finished(harness, state, f"q-{state}") for state in TERMINAL_STATES}
    app.start()
    assert "runwick-retention" in {task.get_name() for task in app._tasks}

    harness.clock.advance(HOUR + 1)
    await eventually(lambda: not _exists(harness, done[JobState.SUCCEEDED]))
    assert _exists(harness, done[JobState.CANCELLED])

    harness.clock.advance(2 * HOUR)
    await eventually(lambda: not _exists(harness, done[JobState.CANCELLED]))
    harness.clock.advance(365 * DAY)
    assert await app.run_retention() == {JobState.SUCCEEDED: 0, JobState.CANCELLED: 0}
    assert _exists(harness, done[JobState.FAILED])  # retain_failed_ms=None keeps them forever


async def test_no_retention_loop_runs_when_every_state_is_kept_forever(harness: Harness) -> None:
    config = dataclasses.replace(
        harness.config, retain_succeeded_ms=None, retain_failed_ms=None, retain_cancelled_ms=None
    )
    opened = await Coordinator.open(config, clock=harness.clock, store=harness.store)
    try:
        opened.start()
        assert "runwick-retention" not in {task.get_name() for task in opened._tasks}
        assert await opened.run_retention() == {}
    finally:
        await opened.stop_background()
        opened.executors.shutdown()
        opened.queue_statistics.close()


async def test_an_operators_purge_removes_every_batch_and_is_audited_once(harness: Harness) -> None:
    small = harness.with_bounds(max_purge_batch=2)
    config = dataclasses.replace(small.config, retain_failed_ms=None)
    app = await Coordinator.open(config, clock=small.clock, store=small.store)
    try:
        made = [_finished(small, JobState.FAILED, f"q{i}") for i in range(5)]
        small.clock.advance(10 * MINUTE)
        recent = _finished(small, JobState.FAILED, "recent")
        small.clock.advance(MINUTE)
        cutoff = small.clock.now_ms() - 5 * MINUTE

        assert await app.purge_jobs(JobState.FAILED, 5 * MINUTE, OPERATOR) == 5

        assert not any(_exists(small, job_id) for job_id in made) and _exists(small, recent)
        events, _ = await app.list_audit_events(action="jobs.purge", target=None, page_size=10, page_token="")
        assert [(e.action, e.target, e.actor_name, e.peer) for e in events] == [
            ("jobs.purge", "failed", "ops", "ipv4:10.1.2.3:5")
        ]
        assert events[0].detail == "state failed, finished before 2026-01-01T00:06:00.000Z"
        assert cutoff == 1_767_225_600_000 + 6 * MINUTE
        assert await app.purge_jobs(JobState.FAILED, 0, OPERATOR) == 1  # everything finished by now
    finally:
        app.executors.shutdown()
        app.queue_statistics.close()


@pytest.mark.parametrize(
    ("state", "older_than_ms", "field", "quoted"),
    [
        (JobState.RUNNING, HOUR, "state", "'running'"),
        (JobState.WAITING, HOUR, "state", "'waiting'"),
        (JobState.AVAILABLE, 0, "state", "'available'"),
        (None, HOUR, "state", "required"),
        (JobState.SUCCEEDED, -1, "older_than", "-1 ms"),
        (JobState.FAILED, None, "older_than", "required"),
    ],
)
async def test_bad_purge_input_is_invalid_argument_naming_the_field_and_removes_nothing(
    harness: Harness, state: JobState | None, older_than_ms: int | None, field: str, quoted: str
) -> None:
    for terminal in TERMINAL_STATES:
        _finished(harness, terminal, f"q-{terminal}")
    _open_jobs(harness)
    harness.clock.advance(DAY)
    before = harness.rows()
    app = await Coordinator.open(harness.config, clock=harness.clock, store=harness.store)
    try:
        with pytest.raises(InvalidArgument) as refused:
            await app.purge_jobs(state, older_than_ms, OPERATOR)
        events, _ = await app.list_audit_events(action="jobs.purge", target=None, page_size=10, page_token="")
    finally:
        app.executors.shutdown()
        app.queue_statistics.close()
    assert refused.value.field == field and quoted in str(refused.value)
    assert harness.rows() == before and events == []


@pytest.mark.parametrize(
    "changes",
    [{"retain_failed_ms": 0}, {"retain_succeeded_ms": -5}, {"retention_interval_s": 0}],
)
async def test_a_bad_retention_setting_stops_the_coordinator_before_it_opens(
    changes: dict[str, int], store: Store
) -> None:
    with pytest.raises(ConfigError, match=next(iter(changes)).removesuffix("_s").removesuffix("_ms")):
        await Coordinator.open(dataclasses.replace(CoordinatorConfig(), **changes), store=store)


# -- PostgreSQL: replicas take disjoint batches ----------------------------------------


@pytest.mark.postgres
def test_postgresql_purge_skips_rows_another_transaction_holds(postgres_url: str) -> None:
    store = Store.open(postgres_url, create=True)
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        harness = Harness.build(store, FakeClock(), CoordinatorConfig())
        held = _finished(harness, JobState.SUCCEEDED, "held")
        free = _finished(harness, JobState.SUCCEEDED, "free")
        harness.clock.advance(DAY)
        with engine.connect() as conn, conn.begin():
            # Another transaction holds the job (as a retry or an enqueue naming it would).
            conn.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": held})
            _purge(harness, JobState.SUCCEEDED, HOUR)  # does not wait for the lock
            assert _exists(harness, held) and not _exists(harness, free)
        _purge(harness, JobState.SUCCEEDED, HOUR)
        assert not _exists(harness, held)
    finally:
        engine.dispose()
        store.close()
