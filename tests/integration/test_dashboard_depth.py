"""The queues page's depth over the last hour, against a real coordinator (port 0) on
both engines: drawn from the queue statistics loop's reads, one point a minute."""

from __future__ import annotations

import re

from tests.integration import test_dashboard_http
from tests.integration.test_dashboard_http import Dashboard

dashboard = test_dashboard_http.dashboard
"""The fixture: a coordinator with its dashboard, and a token per scope."""


async def test_the_queues_page_draws_each_queues_depth_from_the_statistics_reads(
    dashboard: Dashboard,
) -> None:
    app = dashboard.running.app
    for _ in range(3):
        await dashboard.enqueue()
    await app.queue_statistics.run_once()  # what the loop does every health_check_interval_s
    session = await dashboard.session("read")

    page = await session.get("/queues")

    row = re.search(r'<tr data-queue="default">(.*?)</tr>', page.body, re.S)
    assert row is not None
    cell = re.search(r"<td data-depth>(.*?)</td>", row.group(1), re.S)
    assert cell is not None
    assert "<polyline points=" in cell.group(1) and "3 now, at most 3" in cell.group(1)
    assert app.queue_depths("default")[-1] == 3
