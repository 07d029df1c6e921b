"""Schedules beyond pause and resume: create one (a form that keeps what was typed and
says what is wrong), run one now (one job enqueued at once), and delete one after a
confirmation. Each change needs ``manage`` and is audited by the facade."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from coordinator.dashboard.requests import Host, Visitor
from coordinator.dashboard.views import back_to
from coordinator.domain.records import DEFAULT_QUEUE
from coordinator.domain.schedules import CatchUp, NewScheduleSpec
from coordinator.errors import InvalidArgument

FORM_FIELDS = ("name", "cron", "timezone", "wire_name", "queue", "payload", "catch_up")
DEFAULTS = {"timezone": "UTC", "queue": DEFAULT_QUEUE, "payload": "{}", "catch_up": CatchUp.SKIP.value}


def _form_page(
    d: Host, request: Request, visitor: Visitor, values: dict[str, str], error: str | None
) -> Response:
    context: dict[str, Any] = d.context(
        request, visitor, values=values, error=error, catch_ups=[c.value for c in CatchUp]
    )
    return d.renderer.page("schedule_new.html", context, 400 if error else 200)


async def new_schedule(d: Host, request: Request, visitor: Visitor) -> Response:
    return _form_page(d, request, visitor, dict(DEFAULTS), None)


async def create_schedule(d: Host, request: Request, visitor: Visitor) -> Response:
    form = await request.form()
    values = {name: str(form.get(name) or "").strip() for name in FORM_FIELDS}
    try:
        try:
            catch_up = CatchUp(values["catch_up"] or CatchUp.SKIP.value)
        except ValueError:
            raise InvalidArgument(
                "catch_up", f"{values['catch_up'][:64]!r} is not one of skip, run_once"
            ) from None
        spec = NewScheduleSpec(
            name=values["name"],
            cron=values["cron"],
            timezone=values["timezone"] or "UTC",
            wire_name=values["wire_name"],
            payload=(values["payload"] or "{}").encode(),
            queue=values["queue"] or DEFAULT_QUEUE,
            catch_up=catch_up,
        )
        await d.app.create_schedule(spec, visitor.actor)
    except InvalidArgument as exc:
        return _form_page(d, request, visitor, values, str(exc))
    return await back_to(request, "/schedules", "schedule_created")


async def run_schedule(d: Host, request: Request, visitor: Visitor) -> Response:
    job_id = await d.app.run_schedule_now(request.path_params["name"], visitor.actor)
    return await back_to(request, "/schedules", "schedule_run", job=job_id)


async def confirm_delete(d: Host, request: Request, visitor: Visitor) -> Response:
    name = request.path_params["name"]
    context = d.context(request, visitor, name=name, action_url=f"/schedules/{quote(name, safe='')}/delete")
    return d.renderer.page("schedule_delete.html", context)


async def delete_schedule(d: Host, request: Request, visitor: Visitor) -> Response:
    await d.app.delete_schedule(request.path_params["name"], visitor.actor)
    return await back_to(request, "/schedules", "schedule_deleted")
