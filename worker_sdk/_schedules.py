"""Recurring schedules as the client sees them (R-18): ``CatchUp``, ``ScheduleInfo``, and
the requests and conversions of the schedule calls (``worker_sdk._admin``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import cast

from worker_sdk._convert import optional_datetime
from worker_sdk._errors import ArgumentError, CoordinatorError
from worker_sdk.proto.runwick.v1 import admin_service_pb2

_CATCH_UP_PREFIX = "CATCH_UP_"


class CatchUp(StrEnum):
    """What happens to a schedule's ticks missed while no coordinator ran."""

    SKIP = "skip"
    """Recorded as skipped, not run (the default)."""
    RUN_ONCE = "run_once"
    """One job for the whole gap; the other missed ticks are recorded as skipped."""


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A recurring schedule as the coordinator lists it. Times are timezone-aware UTC."""

    name: str
    cron: str
    """Five fields (minute hour day-of-month month day-of-week), six with a leading
    seconds field, or a shorthand such as ``@daily``."""
    timezone: str
    """The IANA time zone the expression is read in, e.g. ``Europe/Berlin``."""
    wire_name: str
    payload: bytes
    queue: str
    catch_up: CatchUp
    paused: bool
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_tick: datetime | None = None
    """The newest tick enqueued; None before the first."""
    last_job_id: str | None = None
    """The job enqueued for ``last_tick``."""
    next_runs: tuple[datetime, ...] = ()
    """The next three ticks; empty while paused."""
    skipped_ticks: tuple[datetime, ...] = ()
    """The newest ticks missed and not run, newest first."""


def catch_up_to_proto(value: CatchUp | str) -> admin_service_pb2.CatchUp:
    """The wire value of a policy (``CatchUp`` or its text, ``skip`` or ``run_once``)."""
    try:
        policy = CatchUp(value)
    except ValueError:
        known = ", ".join(p.value for p in CatchUp)
        raise ArgumentError(f"catch_up must be one of {known}, got {value!r}") from None
    return cast("admin_service_pb2.CatchUp", admin_service_pb2.CatchUp.Value(_CATCH_UP_PREFIX + policy.name))


def catch_up_from_proto(value: int) -> CatchUp:
    """The policy of a wire value (UNSPECIFIED is ``skip``)."""
    if value == admin_service_pb2.CATCH_UP_UNSPECIFIED:
        return CatchUp.SKIP
    try:
        return CatchUp[admin_service_pb2.CatchUp.Name(value).removeprefix(_CATCH_UP_PREFIX)]
    except (KeyError, ValueError):
        raise CoordinatorError(f"the coordinator sent an unknown catch-up policy {value}") from None


def schedule_from_proto(message: admin_service_pb2.Schedule) -> ScheduleInfo:
    return ScheduleInfo(
        name=message.name,
        cron=message.cron,
        timezone=message.timezone,
        wire_name=message.wire_name,
        payload=message.payload,
        queue=message.queue,
        catch_up=catch_up_from_proto(message.catch_up),
        paused=message.paused,
        created_at=optional_datetime(message, "created_at"),
        updated_at=optional_datetime(message, "updated_at"),
        last_tick=optional_datetime(message, "last_tick"),
        last_job_id=message.last_job_id or None,
        next_runs=tuple(stamp.ToDatetime(tzinfo=UTC) for stamp in message.next_runs),
        skipped_ticks=tuple(stamp.ToDatetime(tzinfo=UTC) for stamp in message.skipped_ticks),
    )


def _text(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"{what} must be a str, got {type(value).__name__}")
    return value


def create_schedule_request(
    name: str,
    *,
    cron: str,
    timezone: str,
    wire_name: str,
    payload: bytes,
    queue: str,
    catch_up: CatchUp | str,
) -> admin_service_pb2.CreateScheduleRequest:
    """The request, its types checked here; the values are checked by the coordinator."""
    if not isinstance(payload, bytes | bytearray):
        raise ArgumentError(f"payload must be bytes, got {type(payload).__name__}")
    return admin_service_pb2.CreateScheduleRequest(
        name=_text("name", name),
        cron=_text("cron", cron),
        timezone=_text("timezone", timezone),
        wire_name=_text("wire_name", wire_name),
        payload=bytes(payload),
        queue=_text("queue", queue),
        catch_up=catch_up_to_proto(catch_up),
    )


def schedule_name(name: object) -> str:
    """``name`` when it is a non-empty str (the coordinator checks the rest)."""
    text = _text("name", name)
    if not text:
        raise ArgumentError("name must not be empty")
    return text
