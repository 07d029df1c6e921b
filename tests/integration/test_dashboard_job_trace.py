"""The dashboard's job page names the trace a job belongs to (the trace ID of the W3C
``traceparent`` it was enqueued with, the ID a tracing backend finds it by), against a
real coordinator (port 0) on both engines; a job without one shows a dash."""

from __future__ import annotations

import re

from coordinator.domain.records import NewJobSpec
from tests.integration import test_dashboard_http
from tests.integration.test_dashboard_http import Dashboard

dashboard = test_dashboard_http.dashboard
"""The fixture: a coordinator with its dashboard, and a token per scope."""
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TRACE_CELL = re.compile(r"<dd class=\"mono\" data-job-trace([^>]*)>([^<]*)</dd>")


async def test_the_job_page_shows_the_jobs_trace_id(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    traced, untraced = await app.enqueue(
        [
            NewJobSpec("tests.echo", b"{}", traceparent=TRACEPARENT, tracestate="rojo=00f067aa0ba902b7"),
            NewJobSpec("tests.echo", b"{}"),
        ]
    )
    session = await dashboard.session("read")
    for url in (f"/jobs/{traced.job_id}", f"/jobs/{traced.job_id}?fragment=1"):
        page = await session.get(url)
        assert page.status == 200
        cell = TRACE_CELL.search(page.body)
        assert cell is not None, url
        assert cell.group(2) == TRACE_ID and f'title="traceparent {TRACEPARENT}"' in cell.group(1)
    plain = TRACE_CELL.search((await session.get(f"/jobs/{untraced.job_id}")).body)
    assert plain is not None and plain.groups() == ("", "–")
