"""The SDK's schedule values and requests (R-18): ``ScheduleInfo`` from the wire, and the
type checks made before any call (the coordinator checks the values)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from worker_sdk import ArgumentError, CatchUp, CoordinatorError, ScheduleInfo
from worker_sdk._schedules import (
    catch_up_from_proto,
    catch_up_to_proto,
    create_schedule_request,
    schedule_from_proto,
    schedule_name,
)
from worker_sdk.proto.runwick.v1 import admin_service_pb2

MOMENTS = [datetime(2026, 3, 30, 0, 30, tzinfo=UTC), datetime(2026, 3, 31, 0, 30, tzinfo=UTC)]


def stamp(moment: datetime) -> Timestamp:
    message = Timestamp()
    message.FromDatetime(moment)
    return message


def test_a_schedule_from_the_wire() -> None:
    message = admin_service_pb2.Schedule(
        name="nightly",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        wire_name="reports.nightly",
        payload=b"{}",
        queue="reports",
        catch_up=admin_service_pb2.CATCH_UP_RUN_ONCE,
        paused=False,
        created_at=stamp(MOMENTS[0]),
        updated_at=stamp(MOMENTS[0]),
        next_runs=[stamp(m) for m in MOMENTS],
        skipped_ticks=[stamp(MOMENTS[1])],
    )
    info = schedule_from_proto(message)
    assert info == ScheduleInfo(
        name="nightly",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        wire_name="reports.nightly",
        payload=b"{}",
        queue="reports",
        catch_up=CatchUp.RUN_ONCE,
        paused=False,
        created_at=MOMENTS[0],
        updated_at=MOMENTS[0],
        next_runs=tuple(MOMENTS),
        skipped_ticks=(MOMENTS[1],),
    )
    assert info.last_tick is None and info.last_job_id is None


def test_unspecified_catch_up_reads_as_skip_and_an_unknown_one_is_an_error() -> None:
    assert catch_up_from_proto(admin_service_pb2.CATCH_UP_UNSPECIFIED) is CatchUp.SKIP
    with pytest.raises(CoordinatorError, match="unknown catch-up policy 42"):
        catch_up_from_proto(42)


def test_catch_up_may_be_given_as_text() -> None:
    assert catch_up_to_proto("run_once") == admin_service_pb2.CATCH_UP_RUN_ONCE
    assert catch_up_to_proto(CatchUp.SKIP) == admin_service_pb2.CATCH_UP_SKIP
    with pytest.raises(ArgumentError, match="catch_up must be one of skip, run_once"):
        catch_up_to_proto("sometimes")


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"payload": "{}"}, "payload must be bytes"),
        ({"cron": 5}, "cron must be a str"),
        ({"timezone": None}, "timezone must be a str"),
        ({"queue": b"default"}, "queue must be a str"),
    ],
)
def test_a_create_request_with_a_wrong_type_is_refused_before_any_call(
    changes: dict[str, object], says: str
) -> None:
    fields: dict[str, object] = {
        "cron": "* * * * *",
        "timezone": "UTC",
        "wire_name": "w",
        "payload": b"{}",
        "queue": "default",
        "catch_up": "skip",
    }
    fields.update(changes)
    with pytest.raises(ArgumentError, match=says):
        create_schedule_request("name", **fields)  # type: ignore[arg-type]


def test_a_schedule_name_must_be_text() -> None:
    assert schedule_name("nightly") == "nightly"
    for bad in ("", None, 7):
        with pytest.raises(ArgumentError):
            schedule_name(bad)
