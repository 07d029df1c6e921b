"""What the dashboard's pages show, over plain HTTP against a real coordinator (port 0)
on both engines: only the actions the visitor's token may take, and live fragments that
stay byte-for-byte the same (a 304) while only the clock moves. The server's scope
checks on every action are tested in test_dashboard_http.py."""

from __future__ import annotations

import asyncio
import time

from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.schedules import NewScheduleSpec
from tests.integration.test_dashboard_http import Dashboard, _fail_one, dashboard  # noqa: F401  (the fixture)

SECONDS_BEFORE_A_NEW_MINUTE_S = 3.0
"""The throughput chart has a bar per clock minute, so it rightly changes when a minute
begins: the 304 test starts well inside a minute."""


async def _pages(site: Dashboard, scope: str, paths: list[str]) -> str:
    session = await site.session(scope)
    bodies = []
    for path in paths:
        for variant in (path, path + ("&" if "?" in path else "?") + "fragment=1"):
            page = await session.get(variant)
            assert page.status == 200, (scope, variant, page.body[:300])
            bodies.append(page.body)
    return "\n".join(bodies)


async def test_each_token_sees_only_the_buttons_and_links_its_scopes_allow(dashboard: Dashboard) -> None:  # noqa: F811
    app = dashboard.running.app
    failed_id = await dashboard.enqueue()
    attempt_id = _fail_one(dashboard.running, "the error text")  # fails the oldest: failed_id
    open_id = await dashboard.enqueue()
    await app.create_schedule(NewScheduleSpec("nightly", "30 2 * * *", "UTC", "tests.echo"), SYSTEM_ACTOR)
    paths = ["/", f"/jobs/{failed_id}", f"/jobs/{open_id}", "/failed", "/queues", "/schedules"]
    marks = {
        "manage": [
            f'action="/jobs/{failed_id}/retry"',
            'formaction="/jobs/',  # Retry on the failed list
            'action="/failed/retry"',
            f'action="/jobs/{open_id}/cancel"',
            'action="/queues/default/pause"',
            'action="/queues/default/limit"',
            'action="/schedules/nightly/pause"',
        ],
        "reveal": [f'action="/attempts/{attempt_id}/reveal"'],
        "admin": ['href="/audit"'],
    }
    for scope, allowed in {
        "read": set(),
        "manage": {"manage"},
        "reveal": {"reveal"},
        "admin": {"admin"},
    }.items():
        html = await _pages(dashboard, scope, paths)
        for kind, kind_marks in marks.items():
            for mark in kind_marks:
                assert (mark in html) == (kind in allowed), f"token {scope!r}: {mark} shown: {mark in html}"
    # A read-only visitor still sees the data the buttons would act on.
    reader = await _pages(dashboard, "read", ["/queues", f"/jobs/{failed_id}"])
    assert 'data-queue="default"' in reader and "ValueError" in reader


async def test_a_live_fragment_is_not_modified_while_only_the_clock_moves(dashboard: Dashboard) -> None:  # noqa: F811
    await dashboard.enqueue()  # it waits: no worker serves the queue, so its age grows
    session = await dashboard.session("read")
    to_next_minute_s = 60 - time.time() % 60
    if to_next_minute_s < SECONDS_BEFORE_A_NEW_MINUTE_S:
        await asyncio.sleep(to_next_minute_s + 0.1)
    first = {path: await session.get(path) for path in ("/?fragment=1", "/queues?fragment=1")}
    assert [r.status for r in first.values()] == [200, 200]

    await asyncio.sleep(1.0)  # the clock moves a second; nothing else does

    for path, response in first.items():
        etag = response.header("etag")
        assert etag
        again = await session.get(path, **{"If-None-Match": etag})
        assert (again.status, again.header("etag"), again.body) == (304, etag, ""), path
        # The age is still there, as a time the page counts from (dashboard.js).
        assert "<time data-age" in response.body, path
