"""The dashboard's bulk actions and schedule management over plain HTTP against a real
coordinator (port 0) on both engines: a confirmation with the count before a bulk cancel
or retry, each job audited as the API's bulk calls do; creating, running now, pausing
and deleting schedules; bad input that changes nothing; and a read-only token that sees
none of these buttons and is refused (403) when it posts anyway."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import urlencode

from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.records import NewJobSpec
from coordinator.domain.schedules import NewScheduleSpec
from coordinator.domain.states import JobState
from tests.integration import test_dashboard_http
from tests.integration.test_dashboard_http import Dashboard, _fail_one

dashboard = test_dashboard_http.dashboard
"""The fixture: a coordinator with its dashboard, and a token per scope."""

COUNT = re.compile(r'data-bulk-count="(\d+)"')


async def _enqueue(dashboard: Dashboard, queue: str, n: int, wire_name: str = "tests.echo") -> list[str]:
    enqueued = await dashboard.running.app.enqueue(
        [NewJobSpec(wire_name, b"{}", queue=queue) for _ in range(n)]
    )
    return [e.job_id for e in enqueued]


async def _all(app: object, job_ids: list[str], **expected: object) -> bool:
    """Every job of ``job_ids`` has the ``expected`` field values."""
    for job_id in job_ids:
        job = await app.get_job(job_id)  # type: ignore[attr-defined]
        if any(getattr(job, name) != value for name, value in expected.items()):
            return False
    return True


async def _audited(dashboard: Dashboard, action: str) -> list[str]:
    events, _ = await dashboard.running.app.list_audit_events(
        action=action, target=None, page_size=500, page_token=""
    )
    return [e.target for e in events]


async def test_bulk_cancel_shows_the_count_then_cancels_what_the_filter_matches(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    billing = await _enqueue(dashboard, "billing", 3)
    other = await _enqueue(dashboard, "mail", 2)
    session = await dashboard.session("manage")

    listed = await session.get("/jobs?queue=billing")
    assert 'href="/jobs/bulk/cancel?queue=billing"' in listed.body
    confirm = await session.get("/jobs/bulk/cancel?queue=billing")
    assert confirm.status == 200 and COUNT.findall(confirm.body) == ["3"]
    assert await _all(app, billing, state=JobState.AVAILABLE)  # nothing yet

    form = {"csrf": await session.csrf(), "queue": "billing", "next": "/jobs?queue=billing"}
    done = await session.post("/jobs/bulk/cancel", form)

    assert done.status == 303
    location = done.header("location") or ""
    assert location.startswith("/jobs?queue=billing&notice=bulk_cancel&count=3")
    assert "Cancelled 3 jobs." in (await session.get(location)).body
    assert await _all(app, billing, state=JobState.CANCELLED)
    assert await _all(app, other, state=JobState.AVAILABLE)
    assert sorted(await _audited(dashboard, "job.cancel")) == sorted(billing)


async def test_bulk_retry_of_failed_jobs_and_its_count_by_wire_name(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    failed = await _enqueue(dashboard, "default", 2)
    for _ in failed:
        await asyncio.to_thread(_fail_one, dashboard.running, "boom")
    session = await dashboard.session("manage")

    query = urlencode({"state": "failed", "wire_name": "tests.echo"})
    confirm = await session.get(f"/jobs/bulk/retry?{query}")
    assert COUNT.findall(confirm.body) == ["2"]
    form = {"csrf": await session.csrf(), "state": "failed", "wire_name": "tests.echo"}
    done = await session.post("/jobs/bulk/retry", form)

    assert done.status == 303 and "count=2" in (done.header("location") or "")
    assert await _all(app, failed, generation=2)
    assert sorted(await _audited(dashboard, "job.retry")) == sorted(failed)


async def test_a_bulk_action_refuses_what_the_api_refuses_and_changes_nothing(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    jobs = await _enqueue(dashboard, "billing", 2)
    session = await dashboard.session("manage")
    csrf = await session.csrf()
    for path, form, message in (
        ("/jobs/bulk/cancel", {}, "a bulk cancel of every job is refused"),
        ("/jobs/bulk/cancel", {"state": "succeeded"}, "applies to"),
        ("/jobs/bulk/retry", {"queue": "no spaces"}, "filter.queue"),
        ("/jobs/bulk/delete", {"queue": "billing"}, "is not a bulk action"),
        ("/jobs/bulk/cancel", {"state": "lost"}, "unknown state"),
    ):
        refused = await session.post(path, {"csrf": csrf, **form})
        assert refused.status == 400 and message in refused.body, (path, form, refused.body[:400])
        shown = await session.get(f"{path}?{urlencode(form)}")
        assert shown.status == 400 and message in shown.body
    assert await _all(app, jobs, state=JobState.AVAILABLE)
    assert await _audited(dashboard, "job.cancel") == []
    # A search beyond queue, state and wire name offers no bulk action (it would act on more).
    assert "/jobs/bulk/" not in (await session.get("/jobs?queue=billing&text=x")).body


async def test_schedules_are_created_run_now_paused_and_deleted(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    session = await dashboard.session("manage")
    assert 'href="/schedules/new"' in (await session.get("/schedules")).body
    form = {
        "csrf": await session.csrf("/schedules/new"),
        "name": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "wire_name": "reports.nightly",
        "queue": "reports",
        "payload": '{"full": true}',
        "catch_up": "run_once",
    }
    created = await session.post("/schedules/new", form)
    assert created.status == 303 and created.header("location") == "/schedules?notice=schedule_created"
    (view,), _ = await app.list_schedules(page_size=10, page_token="")
    assert (view.record.cron, view.record.timezone, view.record.queue) == (
        "30 2 * * *",
        "Europe/Berlin",
        "reports",
    )
    page = await session.get("/schedules")
    assert 'action="/schedules/nightly/run"' in page.body and 'href="/schedules/nightly/delete"' in page.body

    ran = await session.post("/schedules/nightly/run", {"csrf": form["csrf"], "next": "/schedules"})
    assert ran.status == 303 and "notice=schedule_run" in (ran.header("location") or "")
    job_id = (ran.header("location") or "").rsplit("job=", 1)[1]
    job = await app.get_job(job_id)
    assert (job.wire_name, job.queue, job.payload, job.state) == (
        "reports.nightly",
        "reports",
        b'{"full": true}',
        JobState.AVAILABLE,
    )
    assert await _audited(dashboard, "schedule.run_now") == ["nightly"]
    (still,), _ = await app.list_schedules(page_size=10, page_token="")
    assert still.record.next_tick_ms == view.record.next_tick_ms  # its own ticks are not moved

    assert (await session.post("/schedules/nightly/pause", {"csrf": form["csrf"]})).status == 303
    confirm = await session.get("/schedules/nightly/delete")
    assert confirm.status == 200 and 'action="/schedules/nightly/delete"' in confirm.body
    deleted = await session.post("/schedules/nightly/delete", {"csrf": form["csrf"]})
    assert deleted.status == 303 and (await app.list_schedules(page_size=10, page_token=""))[0] == []
    assert (await app.get_job(job_id)).state is JobState.AVAILABLE  # its jobs stay
    assert await _audited(dashboard, "schedule.delete") == ["nightly"]


async def test_a_bad_schedule_form_keeps_what_was_typed_and_says_what_is_wrong(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    session = await dashboard.session("manage")
    csrf = await session.csrf("/schedules/new")
    good = {"csrf": csrf, "name": "hourly", "cron": "0 * * * *", "wire_name": "tests.echo"}
    for change, message in (
        ({"cron": "every hour"}, "is not a cron expression"),
        ({"timezone": "Mars/Olympus"}, "is not an IANA time zone"),
        ({"name": ""}, "name: must not be empty"),
        ({"wire_name": "has spaces"}, "wire_name"),
        ({"catch_up": "all"}, "is not one of skip, run_once"),
    ):
        refused = await session.post("/schedules/new", {**good, **change})
        assert refused.status == 400 and message in refused.body, (change, refused.body[:2000])
        assert "data-form-error" in refused.body
        typed = change.get("wire_name", "tests.echo")
        assert f'value="{typed}"' in refused.body  # what was typed is kept
    assert (await app.list_schedules(page_size=10, page_token=""))[0] == []
    assert await _audited(dashboard, "schedule.create") == []
    for missing in ("/schedules/ghost/run", "/schedules/ghost/delete"):
        assert (await session.post(missing, {"csrf": csrf})).status == 404


async def test_a_read_only_token_sees_no_bulk_or_schedule_buttons_and_is_refused(
    dashboard: Dashboard,
) -> None:
    app = dashboard.running.app
    jobs = await _enqueue(dashboard, "billing", 1)
    await app.create_schedule(NewScheduleSpec("nightly", "30 2 * * *", "UTC", "tests.echo"), SYSTEM_ACTOR)
    reader = await dashboard.session("read")
    pages = [await reader.get(path) for path in ("/jobs?queue=billing", "/schedules")]
    html = "\n".join(p.body for p in pages)
    for mark in ("/jobs/bulk/", "/schedules/new", "/schedules/nightly/run", "/schedules/nightly/delete"):
        assert mark not in html, mark
    csrf = await reader.csrf()
    for path, form in (
        ("/jobs/bulk/cancel", {"queue": "billing"}),
        ("/jobs/bulk/retry", {"queue": "billing"}),
        ("/schedules/new", {"name": "x", "cron": "* * * * *", "wire_name": "tests.echo"}),
        ("/schedules/nightly/run", {}),
        ("/schedules/nightly/delete", {}),
    ):
        refused = await reader.post(path, {"csrf": csrf, **form})
        assert refused.status == 403 and "lacks the" in refused.body, path
    for path in ("/jobs/bulk/cancel?queue=billing", "/schedules/new", "/schedules/nightly/delete"):
        assert (await reader.get(path)).status == 403, path
    assert (await app.get_job(jobs[0])).state is JobState.AVAILABLE
    assert len((await app.list_schedules(page_size=10, page_token=""))[0]) == 1
    assert await _audited(dashboard, "schedule.run_now") == []
