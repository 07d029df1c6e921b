"""What operators do daily, in headless Chromium against a real coordinator and worker
process: search the jobs and cancel everything a filter matches after a confirmation
with the count; create a schedule, run it now and delete it; read each worker's host and
SDK; see a workflow's graph and its attempts' timeline. Every new page fits a phone
(390 px) and a laptop (1400 px), and a read-only token sees none of the buttons."""

from __future__ import annotations

import re
import socket
from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard
from tests.browser.test_dashboard import shot, sign_in
from tests.browser.test_layout import OVERFLOWING, page_width
from tests.integration.worker_app import AlwaysFails, Echo
from worker_sdk import JobState

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PARKED = "parked-orders-awaiting-manual-review-in-the-european-warehouses"
"""A queue no worker serves: its jobs wait, to be searched and cancelled."""
SCHEDULE = "weekly-inventory-reconciliation-of-every-warehouse-in-the-region"


def _fits(page: Page, path: str, width_px: int) -> None:
    scroll_width, inner_width = page_width(page)
    assert scroll_width <= inner_width, (
        f"{path} is {scroll_width} px wide at {width_px} px: {page.evaluate(OVERFLOWING)}"
    )


@pytest.fixture(scope="module")
def parked(dashboard: Dashboard) -> list[str]:
    """Three jobs waiting on ``PARKED``, then a job that failed twice (two attempts)."""
    with dashboard.client() as client:
        client.configure_job(Echo).with_queue(PARKED)
        jobs = [client.enqueue(Echo(f"parcel REF-{n:03d}")) for n in range(3)]
        client.create_schedule(
            SCHEDULE, cron="0 3 * * 1", timezone="UTC", wire_name="tests.echo", queue=PARKED
        )
        client.configure_job(AlwaysFails).with_max_executions(2).with_retry_delay(
            timedelta(milliseconds=10), timedelta(milliseconds=10)
        )
        failing = client.enqueue(AlwaysFails("twice"))
        assert client.wait(failing, timedelta(seconds=30)).state is JobState.FAILED
    return [*jobs, failing]


@pytest.mark.parametrize("width_px", (390, 1400))
def test_the_new_pages_fit_a_phone_and_a_laptop(
    page: Page, dashboard: Dashboard, parked: list[str], width_px: int
) -> None:
    page.set_viewport_size({"width": width_px, "height": 900})
    sign_in(page, dashboard, dashboard.admin_token)
    views = {
        "search": f"/jobs?text=REF-001&sort=run_at&order=asc&queue={PARKED}",
        "search-error": "/jobs?created_after=yesterday",
        "bulk": f"/jobs/bulk/cancel?queue={PARKED}",
        "schedule-new": "/schedules/new",
        "schedule-delete": f"/schedules/{SCHEDULE}/delete",
        "job-timeline": f"/jobs/{parked[3]}",
        "workers": "/workers",
        "queues": "/queues",
    }
    for name, path in views.items():
        page.goto(dashboard.url + path)
        expect(page.locator("main h1")).to_be_visible()
        shot(page, dashboard, f"ops-{name}-{width_px}")
        _fits(page, path, width_px)


def test_a_search_then_a_bulk_cancel_with_its_count_and_confirmation(
    page: Page, dashboard: Dashboard, parked: list[str]
) -> None:
    sign_in(page, dashboard, dashboard.tokens["manage"], "/jobs")
    page.get_by_label("Queue", exact=True).select_option(PARKED)
    page.get_by_role("button", name="Search").click()
    expect(page.locator("tr[data-job]")).to_have_count(3)
    page.get_by_text("Keys, payload text, times and order").click()
    page.get_by_label("Payload contains").fill("REF-002")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("tr[data-job]")).to_have_count(1)
    expect(page.get_by_role("link", name="Cancel all…")).to_have_count(0)  # not for a text search

    page.get_by_label("Payload contains").fill("")
    page.get_by_role("button", name="Search").click()
    page.get_by_role("link", name="Cancel all…").click()
    expect(page.locator("[data-bulk-count]")).to_have_attribute("data-bulk-count", "3")
    page.get_by_role("button", name="Cancel 3 jobs").click()

    expect(page.locator(".notice")).to_have_text("Cancelled 3 jobs.")
    expect(page.locator("tr[data-job] .state-cancelled")).to_have_count(3)


def test_a_schedule_is_created_run_now_and_deleted(page: Page, dashboard: Dashboard) -> None:
    sign_in(page, dashboard, dashboard.tokens["manage"], "/schedules")
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name", exact=True).fill("browser-hourly")
    page.get_by_label("Cron expression").fill("every hour")
    page.get_by_label("Wire name").fill("tests.echo")
    page.get_by_label("Payload", exact=True).fill('{"text": "from the schedule"}')
    page.get_by_role("button", name="Create schedule").click()
    expect(page.locator("[data-form-error]")).to_contain_text("is not a cron expression")
    expect(page.get_by_label("Wire name")).to_have_value("tests.echo")  # what was typed stays

    page.get_by_label("Cron expression").fill("0 * * * *")
    page.get_by_role("button", name="Create schedule").click()
    row = page.locator('tr[data-schedule="browser-hourly"]')
    expect(row).to_be_visible()
    row.get_by_role("button", name="Run now").click()
    expect(page.locator(".notice")).to_have_text("Enqueued a job from the schedule to run now.")
    job_id = re.search(r"job=([0-9a-f-]{36})", page.url)
    assert job_id is not None
    with dashboard.client() as client:
        assert client.wait(job_id.group(1), timedelta(seconds=30)).state is JobState.SUCCEEDED

    page.locator('tr[data-schedule="browser-hourly"]').get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Delete this schedule").click()
    expect(page.locator(".notice")).to_have_text("Schedule deleted; the jobs it enqueued stay.")
    expect(page.locator('tr[data-schedule="browser-hourly"]')).to_have_count(0)


def test_the_workers_page_shows_the_real_workers_host_and_sdk(page: Page, dashboard: Dashboard) -> None:
    sign_in(page, dashboard, dashboard.tokens["read"], "/workers")
    expect(page.locator("[data-worker-host]")).to_have_text(socket.gethostname())
    expect(page.locator("[data-worker-sdk]")).to_have_text(re.compile(r"^runwick-python/\S+$"))


def test_a_read_only_token_sees_no_bulk_or_schedule_buttons(
    page: Page, dashboard: Dashboard, parked: list[str]
) -> None:
    sign_in(page, dashboard, dashboard.tokens["read"], f"/jobs?queue={PARKED}")
    expect(page.locator("tr[data-job]").first).to_be_visible()
    expect(page.get_by_role("link", name="Cancel all…")).to_have_count(0)
    page.goto(dashboard.url + "/schedules")
    expect(page.locator(f'tr[data-schedule="{SCHEDULE}"]')).to_be_visible()
    for name in ("New schedule", "Delete…"):
        expect(page.get_by_role("link", name=name)).to_have_count(0)
    expect(page.get_by_role("button", name="Run now")).to_have_count(0)
