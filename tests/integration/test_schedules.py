"""Recurring schedules (R-18) over real gRPC with the SDK client, on both engines: the
calls, their statuses and details, the audit log, and the coordinator's own loop
enqueueing ticks."""

from __future__ import annotations

import grpc
import pytest

from coordinator.config import CoordinatorConfig
from coordinator.process import start_coordinator
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.support import eventually, eventually_async
from worker_sdk import AlreadyExists, ArgumentError, AsyncClient, CatchUp, JobNotFound, JobState
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

HOUR_MS = 3_600_000


async def test_create_list_pause_resume_delete_through_the_sdk(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    created = await client.create_schedule(
        "nightly",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        wire_name="reports.nightly",
        payload=b'{"kind": "daily"}',
        queue="reports",
        catch_up="run_once",
    )
    assert (created.name, created.cron, created.timezone, created.queue) == (
        "nightly",
        "30 2 * * *",
        "Europe/Berlin",
        "reports",
    )
    assert created.catch_up is CatchUp.RUN_ONCE and not created.paused
    assert len(created.next_runs) == 3 and created.next_runs == tuple(sorted(created.next_runs))
    assert all(run.tzinfo is not None for run in created.next_runs)
    assert created.last_tick is None and created.skipped_ticks == ()

    await client.create_schedule("hourly", cron="@hourly", timezone="UTC", wire_name="reports.hourly")
    listed = [s async for s in client.list_schedules(page_size=1)]  # two pages
    assert [s.name for s in listed] == ["hourly", "nightly"]
    assert listed[0].catch_up is CatchUp.SKIP and listed[0].payload == b"{}"
    assert listed[1].payload == b'{"kind": "daily"}'

    paused = await client.pause_schedule("nightly")
    assert paused.paused and paused.next_runs == ()
    resumed = await client.resume_schedule("nightly")
    assert not resumed.paused and len(resumed.next_runs) == 3
    deleted = await client.delete_schedule("hourly")
    assert deleted.name == "hourly"
    assert [s.name async for s in client.list_schedules()] == ["nightly"]

    events = [(e.action, e.target) async for e in client.list_audit_events()]
    assert list(reversed(events)) == [
        ("schedule.create", "nightly"),
        ("schedule.create", "hourly"),
        ("schedule.pause", "nightly"),
        ("schedule.resume", "nightly"),
        ("schedule.delete", "hourly"),
    ]


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"cron": "61 * * * *"}, "cron", "CRON_INVALID"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "TIMEZONE_INVALID"),
    ],
)
async def test_a_bad_expression_or_zone_is_invalid_argument_naming_it(
    client: AsyncClient, fields: dict[str, str], field: str, reason: str
) -> None:
    request = {"cron": "0 * * * *", "timezone": "UTC", "wire_name": "reports.hourly", **fields}
    with pytest.raises(ArgumentError) as refused:
        await client.create_schedule("bad", **request)  # type: ignore[arg-type]
    error = refused.value
    assert error.status_code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == reason
    assert [v.field for v in error.field_violations] == [field]
    assert repr(fields[field]) in str(error)
    assert [s async for s in client.list_schedules()] == []
    assert [e async for e in client.list_audit_events()] == []


async def test_a_taken_name_is_already_exists_and_an_unknown_one_not_found(client: AsyncClient) -> None:
    await client.create_schedule("nightly", cron="0 3 * * *", timezone="UTC", wire_name="reports.nightly")

    with pytest.raises(AlreadyExists) as taken:
        await client.create_schedule("nightly", cron="0 4 * * *", timezone="UTC", wire_name="other.job")
    assert taken.value.status_code is grpc.StatusCode.ALREADY_EXISTS
    assert taken.value.reason == "SCHEDULE_EXISTS" and "'nightly'" in str(taken.value)

    for call in (client.pause_schedule, client.resume_schedule, client.delete_schedule):
        with pytest.raises(JobNotFound) as unknown:
            await call("no-such-schedule")
        assert unknown.value.status_code is grpc.StatusCode.NOT_FOUND
        assert unknown.value.reason == "SCHEDULE_NOT_FOUND"
        assert "'no-such-schedule'" in str(unknown.value)
    [kept] = [s async for s in client.list_schedules()]
    assert (kept.cron, kept.wire_name, kept.paused) == ("0 3 * * *", "reports.nightly", False)


async def test_the_coordinators_loop_enqueues_each_tick(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    await client.create_schedule("every-second", cron="* * * * * *", timezone="UTC", wire_name="tests.tick")

    async def three_ticks() -> list[str]:
        jobs = [job async for job in client.list_jobs(wire_name="tests.tick")]
        return [job.idempotency_key or "" for job in jobs] if len(jobs) >= 3 else []

    keys = await eventually_async(three_ticks, timeout=20)
    await client.pause_schedule("every-second")
    assert all(key.startswith("schedule:every-second:") for key in keys)
    assert len(set(keys)) == len(keys)
    info = await client.get((await anext(client.list_jobs(wire_name="tests.tick"))).id)
    assert info.state is JobState.AVAILABLE and info.queue == "default" and info.payload == b"{}"
    [schedule] = [s async for s in client.list_schedules()]
    assert schedule.last_job_id is not None and schedule.last_tick is not None


async def test_after_downtime_missed_ticks_are_listed_as_skipped(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    # The coordinator's clock at ten past an hour, so the hours that pass are known.
    now = coordinator.running.clock.now_ms()
    coordinator.clock.offset_ms += (now // HOUR_MS + 1) * HOUR_MS + 600_000 - now
    await client.create_schedule("hourly", cron="0 * * * *", timezone="UTC", wire_name="reports.hourly")
    coordinator.clock.offset_ms += 3 * HOUR_MS  # three ticks pass with no pass run
    await coordinator.running.app.run_schedules()

    [schedule] = [s async for s in client.list_schedules()]
    assert len(schedule.skipped_ticks) == 3
    assert schedule.skipped_ticks == tuple(sorted(schedule.skipped_ticks, reverse=True))
    assert all(tick.minute == 0 and tick.second == 0 for tick in schedule.skipped_ticks)
    assert [job async for job in client.list_jobs(wire_name="reports.hourly")] == []


async def test_a_ticks_job_wakes_an_idle_worker_at_once(database_url: str) -> None:
    """No idle re-check: only the facade's wake-up after a pass can hand the job over."""
    config = CoordinatorConfig(database_url=database_url, port=0, idle_recheck_interval_s=3600)
    running = await start_coordinator(config)
    worker = RawWorker(running.target, "idle-worker", ["tests.tick"])
    try:
        await worker.next("welcome")
        worker.send(credit=pb.Credit(count=1))
        await eventually(lambda: running.app.dispatcher.claim_rounds >= 1)  # it looked, found none
        async with AsyncClient(running.target) as client:
            await client.create_schedule(
                "every-second", cron="* * * * * *", timezone="UTC", wire_name="tests.tick"
            )
            assignment = await worker.next("assignment", timeout=10)
            await client.pause_schedule("every-second")
            job = await client.get(assignment.job_id)  # type: ignore[attr-defined]
        assert (job.idempotency_key or "").startswith("schedule:every-second:")
    finally:
        await worker.close()
        await running.stop(grace_s=1)
