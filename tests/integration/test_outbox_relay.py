"""The outbox end to end inside one process: writes in the application's transaction
(Core and ORM) on SQLite and PostgreSQL, an ``OutboxRelay`` thread, and a real
coordinator on port 0. Crashes and outages with real processes are in
``test_outbox_processes.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, create_engine, insert, select, text
from sqlalchemy.orm import Session

from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import StoreBounds
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.outbox_app import FAST, WIRE_NAME, Capture, outbox
from tests.support import eventually, eventually_async, free_port
from tests.support.outbox import app_engine, app_url, outbox_rows, postgres_app_url
from worker_sdk import ArgumentError, AsyncClient, EnqueueItem, JobInfo, new_job_id
from worker_sdk.outbox import OutboxDatabaseError, OutboxRelay, RelayConfig

__all__ = ["app_engine", "app_url", "postgres_app_url"]  # fixtures


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[RunningCoordinator]:
    running = await start_coordinator(CoordinatorConfig(database_url=f"sqlite:///{tmp_path}/c.db", port=0))
    yield running
    await running.stop(grace_s=1)


async def jobs(target: str) -> list[JobInfo]:
    async with AsyncClient(target) as client:
        return [job async for job in client.list_jobs(wire_name=WIRE_NAME)]


async def relay_until_empty(relay: OutboxRelay, engine: Engine) -> None:
    relay.start()
    try:
        await eventually(lambda: outbox_rows(engine) == 0, what="the outbox emptied")
    finally:
        await asyncio.to_thread(relay.stop)


async def test_committed_rows_become_jobs_once_and_rolled_back_ones_never(
    coordinator: RunningCoordinator, app_engine: Engine
) -> None:
    with app_engine.begin() as conn:
        keys = outbox.enqueue_many(
            conn,
            [
                Capture("o-1"),
                EnqueueItem(Capture("o-2"), queue="payments", priority=4, idempotency_key="o-2"),
            ],
        )
    with pytest.raises(RuntimeError), app_engine.begin() as conn:
        outbox.enqueue(conn, Capture("rolled-back"))
        raise RuntimeError("the order failed")
    relay = OutboxRelay(app_engine, coordinator.target, config=FAST, registry=CollectorRegistry())
    await relay_until_empty(relay, app_engine)
    found = await jobs(coordinator.target)
    assert sorted(job.idempotency_key or "" for job in found) == sorted(keys)
    assert {(job.queue, job.priority) for job in found} == {("default", 0), ("payments", 4)}
    assert relay.relayed == 2 and relay.failed == 0
    assert await asyncio.to_thread(relay.run_once) == 0


async def test_an_orm_session_writes_in_its_own_transaction(
    coordinator: RunningCoordinator, app_engine: Engine
) -> None:
    with Session(app_engine) as session:
        outbox.enqueue(session, Capture("kept"), idempotency_key="kept")
        session.commit()
        outbox.enqueue(session, Capture("dropped"), idempotency_key="dropped")
        session.rollback()
    relay = OutboxRelay(app_engine, coordinator.target, config=FAST, registry=CollectorRegistry())
    await relay_until_empty(relay, app_engine)
    assert [job.idempotency_key for job in await jobs(coordinator.target)] == ["kept"]


async def test_a_refused_item_writes_nothing_even_when_the_caller_commits(app_engine: Engine) -> None:
    with app_engine.begin() as conn:
        with pytest.raises(ArgumentError, match=r"job 1: .*not a valid name"):
            outbox.enqueue_many(conn, [Capture("a"), EnqueueItem(Capture("b"), queue="no/slashes")])
        with pytest.raises(ArgumentError, match="over the limit"):
            outbox.enqueue(conn, Capture("x" * 70_000))
    assert outbox_rows(app_engine) == 0


async def test_a_row_the_coordinator_refuses_is_moved_aside_and_the_rest_are_relayed(
    tmp_path: Path, app_engine: Engine
) -> None:
    small = CoordinatorConfig(
        database_url=f"sqlite:///{tmp_path}/c.db", port=0, bounds=StoreBounds(max_payload_bytes=100)
    )
    running = await start_coordinator(small)
    try:
        with app_engine.begin() as conn:
            outbox.enqueue_many(conn, [Capture("a"), Capture("b" * 200), Capture("c")])
            conn.execute(
                insert(outbox.table).values(job=b"\xff\xff not a job", idempotency_key="x", created_at_ms=0)
            )
        registry = CollectorRegistry()
        relay = OutboxRelay(app_engine, running.target, config=FAST, registry=registry)
        await relay_until_empty(relay, app_engine)
        assert sorted(job.state.value for job in await jobs(running.target)) == ["available", "available"]
        assert (relay.relayed, relay.failed) == (2, 2)
        assert registry.get_sample_value("runwick_outbox_failed_total", {"table": "runwick_outbox"}) == 2
        with app_engine.connect() as conn:
            errors = conn.execute(select(outbox.table.c.error).order_by(outbox.table.c.id)).scalars().all()
        assert "PAYLOAD_TOO_LARGE" in errors[0] and "holds no job" in errors[1]
    finally:
        await running.stop(grace_s=1)


async def test_a_parent_written_first_reaches_the_coordinator_first(
    coordinator: RunningCoordinator, app_engine: Engine
) -> None:
    parent_id = new_job_id()
    with app_engine.begin() as conn:
        outbox.enqueue(conn, Capture("parent"), job_id=parent_id)
    with app_engine.begin() as conn:
        outbox.enqueue(conn, Capture("child"), parents=[parent_id], idempotency_key="child")
    one_at_a_time = RelayConfig(batch_size=1, poll_interval_s=0.05)
    relay = OutboxRelay(app_engine, coordinator.target, config=one_at_a_time, registry=CollectorRegistry())
    await relay_until_empty(relay, app_engine)
    async with AsyncClient(coordinator.target) as client:
        child = next(job for job in await jobs(coordinator.target) if job.idempotency_key == "child")
        assert (await client.get(child.id)).parent_ids == (parent_id,)


async def test_metrics_show_the_backlog_then_what_was_relayed(
    coordinator: RunningCoordinator, app_engine: Engine
) -> None:
    with app_engine.begin() as conn:
        outbox.enqueue_many(conn, [Capture(str(n)) for n in range(3)])
    registry = CollectorRegistry()
    relay = OutboxRelay(app_engine, coordinator.target, config=FAST, registry=registry)
    relay.refresh_backlog()
    labels = {"table": "runwick_outbox"}
    assert registry.get_sample_value("runwick_outbox_pending_rows", labels) == 3
    assert (registry.get_sample_value("runwick_outbox_oldest_pending_age_seconds", labels) or 0) >= 0
    await relay_until_empty(relay, app_engine)
    relay.refresh_backlog()
    assert registry.get_sample_value("runwick_outbox_pending_rows", labels) == 0
    assert registry.get_sample_value("runwick_outbox_oldest_pending_age_seconds", labels) == 0
    assert registry.get_sample_value("runwick_outbox_relayed_total", labels) == 3


async def test_rows_wait_while_no_coordinator_answers_and_go_once_one_does(
    tmp_path: Path, app_engine: Engine
) -> None:
    port = free_port()
    registry = CollectorRegistry()
    relay = OutboxRelay(app_engine, f"127.0.0.1:{port}", config=FAST, registry=registry)
    with app_engine.begin() as conn:
        outbox.enqueue_many(conn, [Capture("early"), Capture("waits")])
    relay.start()
    try:
        await eventually(
            lambda: (
                (
                    registry.get_sample_value("runwick_outbox_send_errors_total", {"table": "runwick_outbox"})
                    or 0
                )
                >= 2
            ),
            what="the relay failed to send, twice",
        )
        assert outbox_rows(app_engine) == 2
        running = await start_coordinator(
            CoordinatorConfig(database_url=f"sqlite:///{tmp_path}/c.db", port=port)
        )
        try:
            await eventually(lambda: outbox_rows(app_engine) == 0, what="the outbox emptied")
            assert len(await jobs(running.target)) == 2
        finally:
            await running.stop(grace_s=1)
    finally:
        await asyncio.to_thread(relay.stop)


@pytest.mark.postgres
async def test_on_postgresql_a_commit_wakes_an_idle_relay_by_notify(
    coordinator: RunningCoordinator, postgres_app_url: str
) -> None:
    engine = create_engine(postgres_app_url)
    from tests.integration.outbox_app import metadata

    metadata.drop_all(engine)
    metadata.create_all(engine)
    # Polling an hour apart: only the notification can bring the row in time.
    config = RelayConfig(poll_interval_s=3600, backlog_interval_s=3600)
    relay = OutboxRelay(engine, coordinator.target, config=config, registry=CollectorRegistry())
    relay.start()
    try:
        # No race to wait out: the relay LISTENs before its first look, so a commit
        # before that look is found by it, and one after it is notified.
        with engine.begin() as conn:
            outbox.enqueue(conn, Capture("notified"), idempotency_key="notified")
        await eventually_async(
            lambda: _has_job(coordinator.target, "notified"), what="the job arrived on the notification"
        )
    finally:
        await asyncio.to_thread(relay.stop)
        engine.dispose()


async def _has_job(target: str, key: str) -> bool:
    return any(job.idempotency_key == key for job in await jobs(target))


def test_bad_database_urls_and_a_missing_table_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="not a SQLAlchemy database URL"):
        OutboxRelay("not a url", "127.0.0.1:1")
    with pytest.raises(ArgumentError, match="not a usable database URL"):
        OutboxRelay("nosuchdb://x/y", "127.0.0.1:1")
    unreachable = OutboxRelay("postgresql+psycopg://app:secret@127.0.0.1:1/app", "127.0.0.1:1")
    with pytest.raises(OutboxDatabaseError, match="cannot reach the application database") as raised:
        unreachable.check()
    assert "secret" not in str(raised.value)
    empty = OutboxRelay(f"sqlite:///{tmp_path}/empty.db", "127.0.0.1:1")
    with pytest.raises(OutboxDatabaseError, match="no table 'runwick_outbox'"):
        empty.check()


@pytest.mark.postgres
async def test_on_postgresql_a_relay_whose_listen_connection_dies_listens_again(
    coordinator: RunningCoordinator, postgres_app_url: str
) -> None:
    engine = create_engine(postgres_app_url)
    from tests.integration.outbox_app import metadata

    metadata.drop_all(engine)
    metadata.create_all(engine)
    config = RelayConfig(poll_interval_s=3600, backlog_interval_s=3600)
    relay = OutboxRelay(engine, coordinator.target, config=config, registry=CollectorRegistry())
    listening = text(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND datname = current_database()"
    )
    relay.start()
    try:
        # Autocommit: pg_stat_activity is read once per transaction.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            first = await eventually(
                lambda: conn.execute(listening).scalars().all(), what="the relay listens"
            )
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first[0]})
            await eventually(
                lambda: set(conn.execute(listening).scalars().all()) - set(first),
                what="the relay listens again on a new connection",
            )
        with engine.begin() as conn:
            outbox.enqueue(conn, Capture("after"), idempotency_key="after-relisten")
        await eventually_async(lambda: _has_job(coordinator.target, "after-relisten"), what="notified again")
    finally:
        await asyncio.to_thread(relay.stop)
        engine.dispose()


async def test_a_row_with_a_chosen_job_id_whose_answer_was_lost_is_relayed_once(
    coordinator: RunningCoordinator, app_engine: Engine
) -> None:
    ours, foreign = new_job_id(), new_job_id()
    async with AsyncClient(coordinator.target) as client:
        await client.enqueue_many([EnqueueItem(Capture("someone else's"), job_id=foreign)])
    with app_engine.begin() as conn:
        outbox.enqueue(conn, Capture("ours"), job_id=ours, idempotency_key="ours")
    with app_engine.begin() as conn:
        outbox.enqueue(conn, Capture("clash"), job_id=foreign, idempotency_key="clash")
    lost = []

    def lose_the_first_answer(step: str) -> None:
        if step == "after_ack" and not lost:
            lost.append(step)
            raise ConnectionResetError("the answer was lost")  # the batch rolls back: rows stay

    one_at_a_time = RelayConfig(batch_size=1, poll_interval_s=0.05, backoff_initial_s=0.05)
    relay = OutboxRelay(
        app_engine,
        coordinator.target,
        config=one_at_a_time,
        registry=CollectorRegistry(),
        observer=lose_the_first_answer,
    )
    await relay_until_empty(relay, app_engine)
    assert lost and (relay.relayed, relay.failed) == (1, 1)
    assert sorted(job.id for job in await jobs(coordinator.target)) == sorted([ours, foreign])
    with app_engine.connect() as conn:
        (error,) = conn.execute(select(outbox.table.c.error)).scalars().all()
    assert "JOB_ID_TAKEN" in error
