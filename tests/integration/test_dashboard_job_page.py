"""The job page's workflow neighbourhood and attempt timeline over plain HTTP against a
real coordinator (port 0) on both engines: parents and children with their states and
links, at most 64 each way (said when there are more), and one bar per attempt."""

from __future__ import annotations

import asyncio
import re

from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.graph import GRAPH_LIMIT
from coordinator.domain.records import NewJobSpec
from tests.integration import test_dashboard_http
from tests.integration.test_dashboard_http import Dashboard, _fail_one

dashboard = test_dashboard_http.dashboard
"""The fixture: a coordinator with its dashboard, and a token per scope."""


async def test_the_job_page_shows_parents_and_children_with_states_bounded(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    parent = await dashboard.enqueue()
    await asyncio.to_thread(_fail_one, dashboard.running, "boom")  # the parent fails
    hub = (await app.enqueue([NewJobSpec("tests.echo", b"{}", parent_ids=(parent,))]))[0].job_id
    children = [
        e.job_id
        for e in await app.enqueue(
            [NewJobSpec("tests.child", b"{}", parent_ids=(hub,)) for _ in range(GRAPH_LIMIT + 3)]
        )
    ]
    session = await dashboard.session("read")

    page = await session.get(f"/jobs/{hub}")

    assert page.status == 200
    assert re.search(rf'data-parent="{parent}"><span class="state state-failed">failed</span>', page.body)
    assert f'href="/jobs/{parent}"' in page.body
    shown = re.findall(r'data-child="([0-9a-f-]{36})"', page.body)
    assert shown == sorted(children)[:GRAPH_LIMIT]
    assert f"Only the first {GRAPH_LIMIT} are shown." in page.body
    lone = await session.get(f"/jobs/{children[0]}")
    assert f'data-parent="{hub}"' in lone.body and "data-child=" not in lone.body


async def test_the_job_page_draws_one_timeline_bar_per_attempt(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    job_id = await dashboard.enqueue()
    session = await dashboard.session("read")
    assert "data-timeline" not in (await session.get(f"/jobs/{job_id}")).body  # no attempt yet

    await asyncio.to_thread(_fail_one, dashboard.running, "boom")
    await app.retry(job_id, SYSTEM_ACTOR)
    await asyncio.to_thread(_fail_one, dashboard.running, "boom again")
    page = await session.get(f"/jobs/{job_id}?fragment=1")

    assert page.status == 200 and "data-timeline" in page.body
    assert len(re.findall(r'<rect class="bar-wait"', page.body)) == 2
    assert len(re.findall(r'<rect class="bar-run outcome-permanent_failure"', page.body)) == 2
    again = await session.get(f"/jobs/{job_id}?fragment=1", **{"If-None-Match": page.header("etag") or ""})
    assert again.status == 304  # the picture does not move with the clock
