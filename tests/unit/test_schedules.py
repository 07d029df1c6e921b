"""Recurring schedules' pure rules (R-18): which ticks a pass runs and skips
(``plan_ticks`` over a plain list of ticks), the DST rule for wall times, cron checks and
iteration (``service.cron``), and the catch-up policy on all three sides."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import islice
from zoneinfo import ZoneInfo

import pytest

import worker_sdk
from coordinator.api.admin_servicer import PB_TO_CATCH_UP, catch_up_from_pb
from coordinator.domain import schedules as domain
from coordinator.domain.schedules import CatchUp, TickPlan, idempotency_key, instants, iso_tick, plan_ticks
from coordinator.errors import InvalidArgument
from coordinator.service.cron import MACROS, Cron, CronError, normalize_cron
from worker_sdk import _schedules as sdk
from worker_sdk.proto.runwick.v1 import admin_service_pb2

BERLIN = ZoneInfo("Europe/Berlin")
S = 1_000


class ListTicks:
    """Ticks at the given instants (``domain.schedules.Ticks``)."""

    def __init__(self, *ticks: int) -> None:
        self.ticks = sorted(ticks)

    def after(self, after_ms: int) -> Iterator[int]:
        return (t for t in self.ticks if t > after_ms)

    def before(self, before_ms: int) -> Iterator[int]:
        return (t for t in reversed(self.ticks) if t < before_ms)

    def next_after(self, after_ms: int) -> int | None:
        return next(self.after(after_ms), None)


EVERY_10_S = ListTicks(*range(10 * S, 1_000 * S + 1, 10 * S))


def plan(
    ticks: ListTicks = EVERY_10_S,
    *,
    next_tick: int,
    now: int,
    grace: int = 25 * S,
    catch_up: CatchUp = CatchUp.SKIP,
    keep: int = 100,
    max_run: int = 500,
) -> TickPlan:
    return plan_ticks(
        ticks,
        next_tick_ms=next_tick,
        now_ms=now,
        grace_ms=grace,
        catch_up=catch_up,
        keep_skipped=keep,
        max_run=max_run,
    )


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


# -- plan_ticks -----------------------------------------------------------------------


def test_nothing_is_due_before_the_next_tick() -> None:
    assert plan(next_tick=20 * S, now=19_999) == TickPlan((), (), 20 * S)


def test_a_tick_that_has_come_runs_and_the_schedule_moves_on() -> None:
    assert plan(next_tick=20 * S, now=20 * S) == TickPlan((20 * S,), (), 30 * S)
    assert plan(next_tick=20 * S, now=29_999) == TickPlan((20 * S,), (), 30 * S)


def test_every_tick_within_the_grace_runs() -> None:
    assert plan(next_tick=20 * S, now=45 * S) == TickPlan((20 * S, 30 * S, 40 * S), (), 50 * S)


def test_older_ticks_are_skipped_with_skip() -> None:
    result = plan(next_tick=20 * S, now=85 * S)  # on time from 60 s
    assert result == TickPlan((60 * S, 70 * S, 80 * S), (20 * S, 30 * S, 40 * S, 50 * S), 90 * S)


def test_run_once_runs_the_newest_missed_tick_for_the_gap() -> None:
    result = plan(next_tick=20 * S, now=85 * S, catch_up=CatchUp.RUN_ONCE)
    assert result == TickPlan((50 * S, 60 * S, 70 * S, 80 * S), (20 * S, 30 * S, 40 * S), 90 * S)
    only_gap = plan(next_tick=20 * S, now=58 * S, grace=5 * S, catch_up=CatchUp.RUN_ONCE)
    assert only_gap == TickPlan((50 * S,), (20 * S, 30 * S, 40 * S), 60 * S)


def test_only_the_newest_skipped_ticks_are_kept() -> None:
    result = plan(next_tick=10 * S, now=990 * S, grace=0, keep=2)
    assert result.run == (990 * S,)
    assert result.skipped == (970 * S, 980 * S)
    assert plan(next_tick=10 * S, now=990 * S, grace=0, keep=2, catch_up=CatchUp.RUN_ONCE).skipped == (
        960 * S,
        970 * S,
    )


def test_a_pass_runs_at_most_max_run_and_resumes_after_them() -> None:
    result = plan(next_tick=20 * S, now=100 * S, grace=100 * S, max_run=3)
    assert result == TickPlan((20 * S, 30 * S, 40 * S), (), 50 * S)


def test_no_next_tick_once_the_ticks_end() -> None:
    assert plan(ListTicks(10 * S), next_tick=10 * S, now=10 * S) == TickPlan((10 * S,), (), None)


# -- wall times and daylight saving time ------------------------------------------------


def test_a_nonexistent_wall_time_is_skipped_and_a_repeated_one_taken_once() -> None:
    walls = [
        datetime(2026, 3, 29, 1, 30),  # CET
        datetime(2026, 3, 29, 2, 30),  # does not exist
        datetime(2026, 3, 29, 3, 30),  # CEST
        datetime(2026, 10, 25, 2, 30),  # twice: the first is summer time
    ]
    assert [iso_tick(t) for t in instants(iter(walls), BERLIN)] == [
        "2026-03-29T00:30:00Z",
        "2026-03-29T01:30:00Z",
        "2026-10-25T00:30:00Z",
    ]


def test_every_thirty_minutes_across_the_autumn_change_runs_each_wall_time_once() -> None:
    cron = Cron("*/30 * * * *", BERLIN)
    ticks = [iso_tick(t) for t in islice(cron.after(ms("2026-10-24T23:10:00")), 5)]
    assert ticks == [
        "2026-10-24T23:30:00Z",  # 01:30 CEST
        "2026-10-25T00:00:00Z",  # 02:00 CEST
        "2026-10-25T00:30:00Z",  # 02:30 CEST; 02:00 and 02:30 CET are repeats
        "2026-10-25T02:00:00Z",  # 03:00 CET
        "2026-10-25T02:30:00Z",
    ]


def test_iteration_from_inside_the_repeated_hour_misses_nothing_either_way() -> None:
    cron = Cron("*/30 * * * *", BERLIN)
    inside = ms("2026-10-25T01:10:00")  # 02:10 CET, the second pass of 02:00-03:00
    assert [iso_tick(t) for t in islice(cron.before(inside), 3)] == [
        "2026-10-25T00:30:00Z",
        "2026-10-25T00:00:00Z",
        "2026-10-24T23:30:00Z",
    ]
    assert iso_tick(cron.next_after(inside) or 0) == "2026-10-25T02:00:00Z"


def test_every_second_runs_straight_through_the_spring_gap() -> None:
    cron = Cron("* * * * * *", BERLIN)
    ticks = [iso_tick(t) for t in islice(cron.after(ms("2026-03-29T00:59:58")), 3)]
    assert ticks == ["2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z", "2026-03-29T01:00:01Z"]


def test_after_and_before_are_strict_and_whole_seconds() -> None:
    cron = Cron("0 * * * *", ZoneInfo("UTC"))
    hour = ms("2026-01-01T01:00:00")
    assert cron.next_after(hour - 1) == hour
    assert cron.next_after(hour) == hour + 3_600 * S
    assert next(cron.before(hour + 1)) == hour
    assert next(cron.before(hour)) == hour - 3_600 * S
    assert cron.upcoming(hour) == (hour, hour + 3_600 * S, hour + 7_200 * S)
    assert cron.upcoming(None) == ()


def test_the_idempotency_key_names_the_schedule_and_the_utc_tick() -> None:
    assert idempotency_key("nightly", ms("2026-03-30T00:30:00")) == "schedule:nightly:2026-03-30T00:30:00Z"


# -- cron expressions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "normalized"),
    [
        ("30 2 * * *", "30 2 * * *"),
        ("  30   2 * *  MON-FRI ", "30 2 * * MON-FRI"),
        ("*/15 * * * * *", "*/15 * * * * *"),
        ("0 9 L * *", "0 9 L * *"),
        ("@Daily", "@daily"),
    ],
)
def test_valid_expressions_are_normalized(written: str, normalized: str) -> None:
    assert normalize_cron(written) == normalized


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("", "empty"),
        ("* * *", "3 fields"),
        ("* * * * * * *", "7 fields"),
        ("61 * * * *", "bad minute"),
        ("* 24 * * *", "bad hour"),
        ("0 0 30 2 *", "bad day-of-month"),
        ("0 0 * 13 *", "bad month"),
        ("0 0 * * 8", "bad day-of-week"),
        ("*/0 * * * *", "bad minute"),
        ("@reboot", "unknown shorthand"),
        ("x" * 300, "limit is 256"),
    ],
)
def test_invalid_expressions_say_why(written: str, says: str) -> None:
    with pytest.raises(CronError, match=says):
        normalize_cron(written)


def test_every_shorthand_is_a_valid_expression() -> None:
    for expression in MACROS.values():
        assert normalize_cron(expression) == expression


def test_the_service_names_the_field_and_value_of_a_bad_expression_or_zone() -> None:
    from coordinator.service.schedules import load_zone, parse_cron

    with pytest.raises(InvalidArgument) as bad_cron:
        parse_cron("61 * * * *")
    assert bad_cron.value.field == "cron" and "'61 * * * *'" in str(bad_cron.value)
    with pytest.raises(InvalidArgument) as bad_zone:
        load_zone("Europe/Atlantis")
    assert bad_zone.value.field == "timezone" and "'Europe/Atlantis'" in str(bad_zone.value)
    assert load_zone("Europe/Berlin") == BERLIN


# -- the catch-up policy on every side -------------------------------------------------


def test_catch_up_is_the_same_in_the_domain_the_sdk_and_on_the_wire() -> None:
    wire = {
        name.removeprefix("CATCH_UP_"): number
        for name, number in admin_service_pb2.CatchUp.items()
        if name != "CATCH_UP_UNSPECIFIED"
    }
    assert {p.name: p.value for p in domain.CatchUp} == {p.name: p.value for p in worker_sdk.CatchUp}
    assert set(wire) == {p.name for p in domain.CatchUp}
    assert {policy.name for policy in PB_TO_CATCH_UP.values()} == set(wire)
    for policy in worker_sdk.CatchUp:
        number = sdk.catch_up_to_proto(policy)
        assert catch_up_from_pb(number).name == policy.name
        assert sdk.catch_up_from_proto(number) is policy
    assert catch_up_from_pb(admin_service_pb2.CATCH_UP_UNSPECIFIED) is CatchUp.SKIP
    with pytest.raises(InvalidArgument) as unknown:
        catch_up_from_pb(99)
    assert (unknown.value.field, unknown.value.reason) == ("catch_up", "UNKNOWN_ENUM")
