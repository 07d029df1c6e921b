"""Recurring schedules (R-18) through ``SchedulesService`` on both engines, driven by the
harness's FakeClock: ticks fire on time and once; ticks missed while no coordinator ran
are recorded and not run, or with ``run_once`` folded into one job; time zones across
both DST changes; pause, resume and delete; bad input changes nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from coordinator.domain.access import ANONYMOUS, Actor
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.records import AuditEvent, JobRecord
from coordinator.domain.schedules import CatchUp, NewScheduleSpec, ScheduleView, iso_tick
from coordinator.domain.states import JobState
from coordinator.errors import AlreadyExists, InvalidArgument, NotFound
from coordinator.service.jobs import JobsService
from coordinator.service.schedules import Fired, SchedulesService
from coordinator.store import Store

from .harness import SECOND, SEED, Harness

MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
ACTOR = Actor(ANONYMOUS, "ipv4:127.0.0.1:5000")
WIRE = "reports.nightly"


def at(text: str) -> int:
    """Milliseconds of an ISO 8601 UTC time."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def isos(ticks: Iterator[int] | tuple[int, ...] | list[int]) -> list[str]:
    return [iso_tick(tick) for tick in ticks]


@pytest.fixture
def service(harness: Harness) -> SchedulesService:
    return SchedulesService(harness.store, harness.clock, harness.config, harness.jobs)


def spec(
    name: str = "nightly", cron: str = "* * * * *", timezone: str = "UTC", **fields: object
) -> NewScheduleSpec:
    return NewScheduleSpec(name, cron, timezone, fields.pop("wire_name", WIRE), **fields)  # type: ignore[arg-type]


def run_pass(service: SchedulesService) -> list[Fired]:
    """One pass of the schedule loop, as ``scheduler.cron`` runs it."""
    return [service.fire(name) for name in service.due_names()]


def scheduled_jobs(harness: Harness) -> list[JobRecord]:
    """Jobs enqueued by schedules, oldest tick first."""
    found = [
        harness.job(j.id) for j in harness.all_jobs() if (j.idempotency_key or "").startswith("schedule:")
    ]
    return sorted(found, key=lambda job: job.run_at_ms)


def keys(harness: Harness) -> list[str]:
    return [job.idempotency_key or "" for job in scheduled_jobs(harness)]


def listed(service: SchedulesService) -> dict[str, ScheduleView]:
    views, token = service.list(page_size=0, page_token="")
    assert token == ""
    return {view.record.name: view for view in views}


def events(harness: Harness) -> list[tuple[str, str]]:
    found: list[AuditEvent] = harness.store.list_audit_events(
        action=None, target=None, before_id=None, limit=100
    )
    return [(e.action, e.target) for e in reversed(found)]


def move_to(harness: Harness, ms: int) -> None:
    harness.clock.advance(ms - harness.clock.now_ms())


# -- ticks fire on time, once ----------------------------------------------------------


def test_ticks_fire_on_time_each_once(harness: Harness, service: SchedulesService) -> None:
    created = service.create(spec(payload=b'{"report": "daily"}', queue="reports"), ACTOR)
    assert isos(created.next_runs_ms) == [
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:02:00Z",
        "2026-01-01T00:03:00Z",
    ]

    assert run_pass(service) == []  # nothing due yet
    harness.clock.advance(MINUTE - 1)
    assert run_pass(service) == []
    harness.clock.advance(1)
    [fired] = run_pass(service)
    assert [item.existing for _, item in fired.enqueued] == [False]
    assert run_pass(service) == []  # the same tick is not enqueued twice
    harness.clock.advance(30 * SECOND)
    assert run_pass(service) == []
    harness.clock.advance(30 * SECOND + 400)  # the pass may come a little late
    run_pass(service)

    jobs = scheduled_jobs(harness)
    assert keys(harness) == ["schedule:nightly:2026-01-01T00:01:00Z", "schedule:nightly:2026-01-01T00:02:00Z"]
    assert [job.run_at_ms for job in jobs] == [at("2026-01-01T00:01:00"), at("2026-01-01T00:02:00")]
    assert {(j.wire_name, j.queue, j.payload, j.state) for j in jobs} == {
        (WIRE, "reports", b'{"report": "daily"}', JobState.AVAILABLE)
    }
    view = listed(service)["nightly"]
    assert view.record.last_tick_ms == at("2026-01-01T00:02:00")
    assert view.record.last_job_id == jobs[-1].id
    assert isos(view.next_runs_ms) == ["2026-01-01T00:03:00Z", "2026-01-01T00:04:00Z", "2026-01-01T00:05:00Z"]
    assert view.skipped_ticks_ms == ()


def test_a_tick_late_by_at_most_the_grace_still_runs(harness: Harness, service: SchedulesService) -> None:
    service.create(spec(cron="0 * * * *"), ACTOR)
    move_to(harness, at("2026-01-01T01:00:59"))  # 59 s late, grace 60 s
    run_pass(service)
    assert keys(harness) == ["schedule:nightly:2026-01-01T01:00:00Z"]
    assert listed(service)["nightly"].skipped_ticks_ms == ()


def test_seconds_field_and_shorthands(harness: Harness, service: SchedulesService) -> None:
    every_second = service.create(spec("every-second", "* * * * * *"), ACTOR)
    daily = service.create(spec("daily", "@DAILY", timezone="Europe/Berlin"), ACTOR)

    assert isos(every_second.next_runs_ms) == [
        "2026-01-01T00:00:01Z",
        "2026-01-01T00:00:02Z",
        "2026-01-01T00:00:03Z",
    ]
    assert daily.record.cron == "@daily"
    assert isos(daily.next_runs_ms) == [
        "2026-01-01T23:00:00Z",
        "2026-01-02T23:00:00Z",
        "2026-01-03T23:00:00Z",
    ]
    for _ in range(5):
        harness.clock.advance(SECOND)
        run_pass(service)
    assert len(keys(harness)) == 5


# -- downtime: missed ticks ------------------------------------------------------------


def test_ticks_missed_while_no_coordinator_ran_are_recorded_and_not_run(
    harness: Harness, service: SchedulesService
) -> None:
    service.create(spec(cron="0 * * * *"), ACTOR)
    harness.clock.advance(5 * HOUR + 30 * MINUTE)  # five ticks pass without a pass

    [fired] = run_pass(service)

    assert fired.enqueued == [] and fired.skipped == 5
    assert scheduled_jobs(harness) == []
    view = listed(service)["nightly"]
    assert isos(view.skipped_ticks_ms) == [  # newest first
        "2026-01-01T05:00:00Z",
        "2026-01-01T04:00:00Z",
        "2026-01-01T03:00:00Z",
        "2026-01-01T02:00:00Z",
        "2026-01-01T01:00:00Z",
    ]
    assert view.record.last_tick_ms is None
    assert isos(view.next_runs_ms)[0] == "2026-01-01T06:00:00Z"

    move_to(harness, at("2026-01-01T06:00:00"))  # running again: the next tick runs
    run_pass(service)
    assert keys(harness) == ["schedule:nightly:2026-01-01T06:00:00Z"]


def test_on_time_ticks_run_and_older_ones_are_skipped_in_the_same_pass(
    harness: Harness, service: SchedulesService
) -> None:
    service.create(spec(), ACTOR)  # every minute
    harness.clock.advance(10 * MINUTE + 30 * SECOND)

    run_pass(service)

    assert keys(harness) == ["schedule:nightly:2026-01-01T00:10:00Z"]
    assert len(listed(service)["nightly"].skipped_ticks_ms) == 9  # 00:01 .. 00:09


def test_run_once_enqueues_one_job_for_the_whole_gap(harness: Harness, service: SchedulesService) -> None:
    service.create(spec(cron="0 * * * *", catch_up=CatchUp.RUN_ONCE), ACTOR)
    harness.clock.advance(5 * HOUR + 30 * MINUTE)

    [fired] = run_pass(service)
    assert run_pass(service) == []

    jobs = scheduled_jobs(harness)
    assert [job.idempotency_key for job in jobs] == ["schedule:nightly:2026-01-01T05:00:00Z"]
    assert jobs[0].state is JobState.AVAILABLE  # due at once, though its tick is old
    assert fired.skipped == 4
    view = listed(service)["nightly"]
    assert isos(view.skipped_ticks_ms) == [
        "2026-01-01T04:00:00Z",
        "2026-01-01T03:00:00Z",
        "2026-01-01T02:00:00Z",
        "2026-01-01T01:00:00Z",
    ]
    assert view.record.last_tick_ms == at("2026-01-01T05:00:00")
    assert view.record.last_job_id == jobs[0].id


def test_a_long_gap_keeps_only_the_newest_skipped_ticks(harness: Harness) -> None:
    bounded = harness.with_bounds(max_skipped_ticks=3)
    service = SchedulesService(bounded.store, bounded.clock, bounded.config, bounded.jobs)
    service.create(spec(cron="* * * * * *"), ACTOR)  # every second
    harness.clock.advance(30 * 24 * HOUR)  # a month down: 2.6 million missed ticks

    [fired] = run_pass(service)
    assert fired.skipped == 3
    assert isos(listed(service)["nightly"].skipped_ticks_ms) == [
        "2026-01-30T23:58:59Z",
        "2026-01-30T23:58:58Z",
        "2026-01-30T23:58:57Z",
    ]
    assert len(keys(harness)) == 61  # the last minute, both ends included, was within the grace

    harness.clock.advance(2 * HOUR)  # down again: the oldest kept ones are dropped
    run_pass(service)
    assert isos(listed(service)["nightly"].skipped_ticks_ms) == [
        "2026-01-31T01:58:59Z",
        "2026-01-31T01:58:58Z",
        "2026-01-31T01:58:57Z",
    ]


# -- time zones and daylight saving time ----------------------------------------------


def walk(harness: Harness, service: SchedulesService, start: str, end: str, step_ms: int = MINUTE) -> None:
    """Runs a pass every ``step_ms`` from ``start`` to ``end`` (UTC)."""
    move_to(harness, at(start))
    while harness.clock.now_ms() < at(end):
        harness.clock.advance(step_ms)
        run_pass(service)


def test_a_local_time_that_does_not_exist_is_skipped(harness: Harness, service: SchedulesService) -> None:
    """Europe/Berlin 2026-03-29: clocks go from 02:00 to 03:00, so 02:30 never happens."""
    move_to(harness, at("2026-03-28T12:00:00"))
    created = service.create(spec(cron="30 2 * * *", timezone="Europe/Berlin"), ACTOR)
    assert isos(created.next_runs_ms) == [
        "2026-03-30T00:30:00Z",  # 02:30 summer time; none on the 29th
        "2026-03-31T00:30:00Z",
        "2026-04-01T00:30:00Z",
    ]

    walk(harness, service, "2026-03-28T12:00:00", "2026-03-29T23:00:00", step_ms=10 * MINUTE)
    assert scheduled_jobs(harness) == []
    assert listed(service)["nightly"].skipped_ticks_ms == ()  # not missed: it never existed

    move_to(harness, at("2026-03-30T00:30:00"))
    run_pass(service)
    assert keys(harness) == ["schedule:nightly:2026-03-30T00:30:00Z"]


def test_a_local_time_that_happens_twice_runs_once(harness: Harness, service: SchedulesService) -> None:
    """Europe/Berlin 2026-10-25: clocks go from 03:00 back to 02:00, so 02:30 happens at
    00:30 UTC (summer time) and again at 01:30 UTC; the schedule runs at the first."""
    move_to(harness, at("2026-10-24T12:00:00"))
    created = service.create(spec(cron="30 2 * * *", timezone="Europe/Berlin"), ACTOR)
    assert isos(created.next_runs_ms) == [
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",  # 02:30 standard time from here on
        "2026-10-27T01:30:00Z",
    ]

    walk(harness, service, "2026-10-25T00:00:00", "2026-10-25T03:00:00")

    assert keys(harness) == ["schedule:nightly:2026-10-25T00:30:00Z"]
    assert isos(listed(service)["nightly"].next_runs_ms)[0] == "2026-10-26T01:30:00Z"


def test_an_hourly_schedule_follows_the_wall_clock_across_both_changes(
    harness: Harness, service: SchedulesService
) -> None:
    move_to(harness, at("2026-03-28T22:30:00"))
    service.create(spec("spring", "0 * * * *", "Europe/Berlin"), ACTOR)
    walk(harness, service, "2026-03-28T22:30:00", "2026-03-29T02:30:00")
    assert keys(harness) == [
        "schedule:spring:2026-03-28T23:00:00Z",  # 00:00 CET
        "schedule:spring:2026-03-29T00:00:00Z",  # 01:00 CET
        "schedule:spring:2026-03-29T01:00:00Z",  # 03:00 CEST: 02:00 did not exist
        "schedule:spring:2026-03-29T02:00:00Z",  # 04:00 CEST
    ]


# -- pause, resume, delete ---------------------------------------------------------------


def test_pause_stops_ticks_and_resume_starts_from_the_next_one(
    harness: Harness, service: SchedulesService
) -> None:
    service.create(spec(cron="0 * * * *"), ACTOR)
    paused = service.pause("nightly", ACTOR)
    assert paused.record.paused and paused.next_runs_ms == ()
    assert service.pause("nightly", ACTOR).record == paused.record  # no change, no event

    harness.clock.advance(3 * HOUR + 10 * MINUTE)
    assert run_pass(service) == []
    resumed = service.resume("nightly", ACTOR)
    assert not resumed.record.paused
    assert isos(resumed.next_runs_ms)[0] == "2026-01-01T04:00:00Z"
    assert run_pass(service) == []

    move_to(harness, at("2026-01-01T04:00:00"))
    run_pass(service)
    assert keys(harness) == ["schedule:nightly:2026-01-01T04:00:00Z"]
    assert listed(service)["nightly"].skipped_ticks_ms == ()  # paused ticks are not "missed"
    assert events(harness) == [
        ("schedule.create", "nightly"),
        ("schedule.pause", "nightly"),
        ("schedule.resume", "nightly"),
    ]


def test_delete_removes_the_schedule_and_keeps_its_jobs(harness: Harness, service: SchedulesService) -> None:
    service.create(spec(cron="0 * * * *"), ACTOR)
    harness.clock.advance(2 * HOUR + 30 * MINUTE)
    run_pass(service)  # 01:00 and 02:00 skipped
    move_to(harness, at("2026-01-01T03:00:00"))
    run_pass(service)

    deleted = service.delete("nightly", ACTOR)

    assert deleted.record.name == "nightly"
    assert listed(service) == {}
    assert keys(harness) == ["schedule:nightly:2026-01-01T03:00:00Z"]
    assert harness.store.newest_skipped_ticks(["nightly"], 10) == {}
    move_to(harness, at("2026-01-01T04:00:00"))
    assert run_pass(service) == []
    again = service.create(spec(cron="0 * * * *"), ACTOR)  # the name is free again
    assert again.skipped_ticks_ms == ()
    assert [action for action, _ in events(harness)] == [
        "schedule.create",
        "schedule.delete",
        "schedule.create",
    ]


def test_list_pages_by_name(harness: Harness, service: SchedulesService) -> None:
    for name in ["c", "a", "e", "b", "d"]:
        service.create(spec(name), ACTOR)
    first, token = service.list(page_size=2, page_token="")
    second, token2 = service.list(page_size=2, page_token=token)
    third, token3 = service.list(page_size=2, page_token=token2)
    assert [[v.record.name for v in page] for page in (first, second, third)] == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    assert token3 == ""


@pytest.mark.parametrize("token", ["b", "not a token", "³", "AXM", "AWFi", "x" * 2_000])
def test_a_page_token_this_list_did_not_hand_out_is_refused(service: SchedulesService, token: str) -> None:
    """Page tokens are opaque: a schedule's name, or another list's token, is no token."""
    with pytest.raises(InvalidArgument) as refused:
        service.list(page_size=2, page_token=token)
    assert (refused.value.field, refused.value.reason) == ("page_token", "PAGE_TOKEN_INVALID")


# -- bad input changes nothing -----------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field", "reason", "quoted"),
    [
        ({"cron": "61 * * * *"}, "cron", "CRON_INVALID", "'61 * * * *'"),
        ({"cron": "* * *"}, "cron", "CRON_INVALID", "'* * *'"),
        ({"cron": "@sometimes"}, "cron", "CRON_INVALID", "'@sometimes'"),
        ({"cron": ""}, "cron", "CRON_INVALID", "''"),
        ({"cron": "0 0 30 2 *"}, "cron", "CRON_INVALID", "'0 0 30 2 *'"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "TIMEZONE_INVALID", "'Mars/Olympus_Mons'"),
        ({"timezone": "europe/berlin"}, "timezone", "TIMEZONE_INVALID", "'europe/berlin'"),
        ({"timezone": "localtime"}, "timezone", "TIMEZONE_INVALID", "'localtime'"),
        ({"timezone": "../../etc/passwd"}, "timezone", "TIMEZONE_INVALID", "'../../etc/passwd'"),
        ({"timezone": ""}, "timezone", "TIMEZONE_INVALID", "''"),
        ({"name": "has space"}, "name", "NAME_INVALID", "'has space'"),
        ({"wire_name": "bad/wire"}, "wire_name", "NAME_INVALID", "'bad/wire'"),
        ({"queue": ""}, "queue", "NAME_EMPTY", ""),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_created(
    harness: Harness,
    service: SchedulesService,
    changes: dict[str, str],
    field: str,
    reason: str,
    quoted: str,
) -> None:
    request = dataclasses.replace(spec(), **changes)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as refused:
        service.create(request, ACTOR)
    assert refused.value.field == field
    assert refused.value.reason == reason
    assert quoted in str(refused.value)
    assert listed(service) == {}
    assert events(harness) == []


def test_a_payload_over_the_bound_is_refused(harness: Harness) -> None:
    bounded = harness.with_bounds(max_payload_bytes=8)
    service = SchedulesService(bounded.store, bounded.clock, bounded.config, bounded.jobs)
    with pytest.raises(InvalidArgument) as refused:
        service.create(spec(payload=b'{"too": "large"}'), ACTOR)
    assert (refused.value.field, refused.value.reason) == ("payload", "PAYLOAD_TOO_LARGE")
    assert listed(service) == {}


def test_a_taken_name_is_already_exists_and_the_first_schedule_is_unchanged(
    harness: Harness, service: SchedulesService
) -> None:
    first = service.create(spec(cron="0 * * * *"), ACTOR)
    with pytest.raises(AlreadyExists) as refused:
        service.create(spec(cron="*/5 * * * *", timezone="Asia/Tokyo"), ACTOR)
    assert refused.value.reason == "SCHEDULE_EXISTS"
    assert "'nightly'" in str(refused.value)
    assert listed(service)["nightly"].record == first.record
    assert events(harness) == [("schedule.create", "nightly")]


@pytest.mark.parametrize("action", ["pause", "resume", "delete"])
def test_an_unknown_schedule_is_not_found_naming_it(
    harness: Harness, service: SchedulesService, action: str
) -> None:
    service.create(spec("known"), ACTOR)
    with pytest.raises(NotFound) as refused:
        getattr(service, action)("unknown-one", ACTOR)
    assert refused.value.reason == "SCHEDULE_NOT_FOUND"
    assert "'unknown-one'" in str(refused.value)
    assert list(listed(service)) == ["known"]
    assert events(harness) == [("schedule.create", "known")]


def test_jobs_a_lowered_bound_refuses_are_recorded_as_skipped(
    harness: Harness, service: SchedulesService
) -> None:
    service.create(spec(cron="0 * * * *", payload=b'{"a": "bit large"}'), ACTOR)
    bounded = harness.with_bounds(max_payload_bytes=8)  # the coordinator restarted with a lower bound
    restarted = SchedulesService(bounded.store, bounded.clock, bounded.config, bounded.jobs)
    move_to(harness, at("2026-01-01T01:00:00"))

    [fired] = run_pass(restarted)

    assert fired.enqueued == [] and fired.skipped == 1
    assert scheduled_jobs(harness) == []
    assert isos(listed(restarted)["nightly"].next_runs_ms)[0] == "2026-01-01T02:00:00Z"


# -- a tick's key is the scheduler's alone -----------------------------------------------


@pytest.mark.parametrize("key", ["schedule:nightly:2026-01-01T01:00:00Z", "schedule:", "schedule:anything"])
def test_a_client_enqueue_with_a_tick_key_is_refused_and_writes_nothing(harness: Harness, key: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        harness.enqueue(idempotency_key=key)
    error = refused.value
    assert (error.field, error.reason) == ("jobs[0].idempotency_key", "IDEMPOTENCY_KEY_RESERVED")
    assert "reserved for the jobs of schedules' ticks" in error.description
    assert harness.all_jobs() == []


def test_a_tick_key_taken_before_its_tick_cannot_replace_the_run(
    harness: Harness, service: SchedulesService
) -> None:
    """The attack: enqueue the next tick's key first, so the schedule records that job."""
    service.create(spec(cron="0 * * * *", payload=b'{"real": true}'), ACTOR)
    with contextlib.suppress(InvalidArgument):
        harness.enqueue(
            "attacker.job", b'{"evil": true}', idempotency_key="schedule:nightly:2026-01-01T01:00:00Z"
        )
    move_to(harness, at("2026-01-01T01:00:00"))

    [fired] = run_pass(service)

    assert [item.existing for _, item in fired.enqueued] == [False]
    [job] = scheduled_jobs(harness)
    assert (job.wire_name, job.payload) == (WIRE, b'{"real": true}')
    assert listed(service)["nightly"].record.last_job_id == job.id


# -- replicas ----------------------------------------------------------------------------


def test_two_replicas_firing_together_enqueue_each_tick_once(harness: Harness, database_url: str) -> None:
    """Two services over their own engines on one database, as two coordinator replicas,
    pass over an every-second schedule at the same moments."""
    second_store = Store.open(database_url, create=False, bounds=StoreBounds())
    try:
        second_jobs = JobsService(second_store, harness.clock, harness.config, random.Random(SEED))
        replicas = [
            SchedulesService(harness.store, harness.clock, harness.config, harness.jobs),
            SchedulesService(second_store, harness.clock, harness.config, second_jobs),
        ]
        replicas[0].create(spec("every-second", "* * * * * *"), ACTOR)
        for _ in range(20):
            harness.clock.advance(SECOND)
            start = threading.Barrier(2)

            def fire(replica: SchedulesService, start: threading.Barrier) -> None:
                start.wait()
                run_pass(replica)

            threads = [threading.Thread(target=fire, args=(replica, start)) for replica in replicas]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
    finally:
        second_store.close()

    ticks = keys(harness)
    assert len(ticks) == len(set(ticks)) == 20
    assert ticks[0] == "schedule:every-second:2026-01-01T00:00:01Z"
    assert ticks[-1] == "schedule:every-second:2026-01-01T00:00:20Z"
