"""The dashboard's job page shows the running attempt's latest progress, on the page
and in its live fragment. A real coordinator with its dashboard (port 0), both engines;
the progress goes in through the worker protocol's batched write, as a heartbeat's."""

from __future__ import annotations

import html

from coordinator.domain.progress import Progress, encode_progress
from coordinator.domain.records import WorkerIdentity
from coordinator.service.work import AttemptMessage, ClaimRequest, HeartbeatRequest, WorkBatch
from tests.integration.test_dashboard_http import Dashboard, dashboard  # noqa: F401  (the fixture)


def _running_with_progress(site: Dashboard, progress: Progress | None) -> str:
    """Claims and starts the oldest job as worker ``w`` would, heartbeats it with
    ``progress``; returns the job's ID."""
    ops, worker = site.running.app.ops, WorkerIdentity("w")
    claim = ClaimRequest("w", ("default",), ("tests.echo",), 1, 60_000)
    claimed = ops.process(WorkBatch(claims=[claim])).claims[0][0]
    ops.process(WorkBatch(starts=[AttemptMessage(claimed.attempt_id, worker)]))
    reports = {claimed.attempt_id: encode_progress(progress)} if progress is not None else {}
    beat = HeartbeatRequest([claimed.attempt_id], 60_000, worker, reports)
    assert ops.process(WorkBatch(heartbeats=[beat])).heartbeats[0].lost == set()
    return claimed.job.id


async def test_the_job_page_and_its_live_fragment_show_the_latest_progress(
    dashboard: Dashboard,  # noqa: F811
) -> None:
    await dashboard.enqueue()
    job_id = _running_with_progress(dashboard, Progress(37, 100, "resizing <images>"))
    session = await dashboard.session("read")
    for path in (f"/jobs/{job_id}", f"/jobs/{job_id}?fragment=1"):
        page = await session.get(path)
        assert page.status == 200
        assert html.escape("37/100 (37%) resizing <images>", quote=False) in page.body
        assert "resizing <images>" not in page.body  # escaped, never markup
        assert '<progress max="100" value="37"' in page.body


async def test_a_job_without_progress_shows_a_dash(dashboard: Dashboard) -> None:  # noqa: F811
    await dashboard.enqueue()
    job_id = _running_with_progress(dashboard, None)
    page = await (await dashboard.session("read")).get(f"/jobs/{job_id}")
    assert page.status == 200
    assert "<dt>Progress</dt><dd data-job-progress>–</dd>" in page.body
