"""The dashboard's bulk purge of the finished jobs a filter matches, over plain HTTP
against a real coordinator (port 0) on both engines: admin only (as ``runwick purge``),
a confirmation with the count first, one ``jobs.purge`` audit event naming the filter,
only succeeded, failed or cancelled jobs removed (with the queue counts kept right), and
bad input refused with nothing changed."""

from __future__ import annotations

import asyncio
import re

import pytest

from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState
from coordinator.errors import NotFound
from tests.integration import test_dashboard_http
from tests.integration.test_dashboard_http import Dashboard, _fail_one

dashboard = test_dashboard_http.dashboard
"""The fixture: a coordinator with its dashboard, and a token per scope."""

COUNT = re.compile(r'data-bulk-count="(\d+)"')


async def _enqueue(dashboard: Dashboard, queue: str, n: int) -> list[str]:
    enqueued = await dashboard.running.app.enqueue(
        [NewJobSpec("tests.echo", b"{}", queue=queue) for _ in range(n)]
    )
    return [e.job_id for e in enqueued]


async def _finished_and_not(dashboard: Dashboard) -> tuple[list[str], list[str]]:
    """In queue ``default``: two failed jobs and a cancelled one (to purge) and one
    available; in queue ``mail``: a cancelled one. Returns (to purge, to keep)."""
    app = dashboard.running.app
    failed = await _enqueue(dashboard, "default", 2)
    for _ in failed:
        await asyncio.to_thread(_fail_one, dashboard.running, "boom")
    cancelled, waiting = await _enqueue(dashboard, "default", 2)
    [elsewhere] = await _enqueue(dashboard, "mail", 1)
    for job_id in (cancelled, elsewhere):
        await app.cancel(job_id, SYSTEM_ACTOR)
    return [*failed, cancelled], [waiting, elsewhere]


async def _purge_events(dashboard: Dashboard) -> list[tuple[str, str | None]]:
    events, _ = await dashboard.running.app.list_audit_events(
        action="jobs.purge", target=None, page_size=100, page_token=""
    )
    return [(e.target, e.detail) for e in events]


async def _default_counts(dashboard: Dashboard) -> dict[JobState, int]:
    queues, _ = await dashboard.running.app.list_queues()
    [default] = [q for q in queues if q.queue.name == "default"]
    return {state: n for state, n in default.counts.items() if n}


async def test_bulk_purge_counts_then_removes_only_the_finished_jobs_the_filter_matches(
    dashboard: Dashboard,
) -> None:
    app = dashboard.running.app
    purged, kept = await _finished_and_not(dashboard)
    session = await dashboard.session("admin")

    listed = await session.get("/jobs?queue=default")
    assert 'href="/jobs/bulk/purge?queue=default"' in listed.body
    assert "/jobs/bulk/cancel" not in listed.body  # admin alone does not manage jobs
    confirm = await session.get("/jobs/bulk/purge?queue=default")
    assert confirm.status == 200 and COUNT.findall(confirm.body) == ["3"]
    assert "removed for good" in confirm.body
    assert len([await app.get_job(job_id) for job_id in purged]) == 3  # nothing yet

    form = {"csrf": await session.csrf(), "queue": "default", "next": "/jobs?queue=default"}
    done = await session.post("/jobs/bulk/purge", form)

    assert done.status == 303
    location = done.header("location") or ""
    assert location.startswith("/jobs?queue=default&notice=bulk_purge&count=3")
    assert "Purged 3 jobs." in (await session.get(location)).body
    for job_id in purged:
        with pytest.raises(NotFound):
            await app.get_job(job_id)
    assert [(await app.get_job(job_id)).state for job_id in kept] == [JobState.AVAILABLE, JobState.CANCELLED]
    assert await _purge_events(dashboard) == [("finished", "bulk: queue default")]
    assert await _default_counts(dashboard) == {JobState.AVAILABLE: 1}


async def test_bulk_purge_needs_admin_and_refuses_unfinished_states_changing_nothing(
    dashboard: Dashboard,
) -> None:
    app = dashboard.running.app
    purged, kept = await _finished_and_not(dashboard)
    manager = await dashboard.session("manage")
    assert "/jobs/bulk/purge" not in (await manager.get("/jobs?queue=default")).body
    assert (await manager.get("/jobs/bulk/purge?queue=default")).status == 403
    refused = await manager.post("/jobs/bulk/purge", {"csrf": await manager.csrf(), "queue": "default"})
    assert refused.status == 403 and "lacks the" in refused.body

    admin = await dashboard.session("admin")
    assert "/jobs/bulk/purge" not in (await admin.get("/jobs?queue=default&state=available")).body
    csrf = await admin.csrf()
    for form, message in (
        ({}, "a bulk purge of every job is refused"),
        ({"state": "available"}, "applies to succeeded, failed, cancelled jobs, not available"),
        ({"queue": "no spaces"}, "filter.queue"),
        ({"state": "lost"}, "unknown state"),
    ):
        bad = await admin.post("/jobs/bulk/purge", {"csrf": csrf, **form})
        assert bad.status == 400 and message in bad.body, (form, bad.body[:400])
    assert len([await app.get_job(job_id) for job_id in [*purged, *kept]]) == 5
    assert await _purge_events(dashboard) == []
