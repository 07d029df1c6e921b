"""The dashboard's layout in headless Chromium, against a real coordinator and worker
process that have run real jobs (some succeeded, some failed with long and private
exception types, one waiting on a queue with a long name no worker serves):

- every view fits a phone (390 px), a laptop (1400 px) and a wide screen (1920 px): the
  page never scrolls sideways, and a job's Reveal buttons stay inside their card;
- an exception type shows its class name, not a private module path;
- ages are counted in the browser (the live part's bytes do not change with the clock);
- the screenshot in docs/ is taken here, from this run: with
  ``RUNWICK_UPDATE_SCREENSHOTS=1`` it is written to docs/dashboard.png.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard
from tests.browser.test_dashboard import shot, sign_in
from tests.integration.worker_app import AlwaysFails, Echo, LongNamedFailure, Permanent
from worker_sdk import JobState

pytestmark = [pytest.mark.slow, pytest.mark.browser]

WIDTHS_PX = (390, 1400, 1920)
LONG_QUEUE = "inventory-reservations-for-the-european-warehouses-awaiting-a-worker"
LONG_SCHEDULE = "nightly-inventory-reconciliation-of-every-warehouse-in-the-european-region"
DOCS = Path(__file__).resolve().parents[2] / "docs"
UPDATE_SCREENSHOTS = os.environ.get("RUNWICK_UPDATE_SCREENSHOTS") == "1"
"""Only then are the screenshots in docs/ rewritten: a normal run changes no tracked file."""


@dataclass(frozen=True)
class Scenario:
    long_failure: str
    """A failed job whose attempts carry a long exception type and a long wire name."""
    permanent: str
    """A failed job that raised worker_sdk.PermanentJobFailure."""
    waiting: str
    """An available job on a queue no worker serves."""


@pytest.fixture(scope="module")
def scenario(dashboard: Dashboard) -> Scenario:
    """Real jobs run by the real worker: what an operator would see after a while."""
    with dashboard.client() as client:
        done = [client.enqueue(Echo(f"order {n}")) for n in range(24)]
        client.configure_job(AlwaysFails).with_max_executions(1)
        client.configure_job(Permanent).with_max_executions(1)
        client.configure_job(LongNamedFailure).with_max_executions(2).with_retry_delay(
            timedelta(milliseconds=10), timedelta(milliseconds=10)
        )
        failing = [client.enqueue(AlwaysFails(f"note {n}")) for n in range(2)]
        permanent = client.enqueue(Permanent("A-1042"))
        long_failure = client.enqueue(LongNamedFailure("A-1043"))
        for job_id in done:
            assert client.wait(job_id, timedelta(seconds=30)).state is JobState.SUCCEEDED
        for job_id in (*failing, permanent, long_failure):
            assert client.wait(job_id, timedelta(seconds=30)).state is JobState.FAILED
        client.configure_job(Echo).with_queue(LONG_QUEUE)
        waiting = client.enqueue(Echo("no worker serves this queue"))
        client.create_schedule(
            LONG_SCHEDULE,
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            wire_name="tests.echo",
            payload=b'{"text": "tick"}',
            queue=LONG_QUEUE,
        )
    return Scenario(long_failure, permanent, waiting)


def page_width(page: Page) -> tuple[int, int]:
    scroll_width, inner_width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    return int(scroll_width), int(inner_width)


OVERFLOWING = """() => Array.from(document.querySelectorAll("main *, header *"))
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
    .filter((e) => !Array.from(e.children).some(
        (c) => c.getBoundingClientRect().right > window.innerWidth + 1))
    .slice(0, 5)
    .map((e) => e.tagName + "." + e.className + ": " + (e.textContent || "").trim().slice(0, 60))"""
"""The innermost elements reaching past the window's right edge: what to fix."""


@pytest.mark.parametrize("width_px", WIDTHS_PX)
def test_every_view_fits_the_screen_without_scrolling_sideways(
    page: Page, dashboard: Dashboard, scenario: Scenario, width_px: int
) -> None:
    page.set_viewport_size({"width": width_px, "height": 900})
    sign_in(page, dashboard, dashboard.admin_token)  # every scope: every button shown
    views = {
        "overview": "/",
        "jobs": "/jobs",
        "job": f"/jobs/{scenario.long_failure}",
        "failed": "/failed",
        "queues": "/queues",
        "schedules": "/schedules",
        "workers": "/workers",
        "audit": "/audit",
    }
    for name, path in views.items():
        page.goto(dashboard.url + path)
        expect(page.locator("main h1")).to_be_visible()
        shot(page, dashboard, f"{name}-{width_px}")
        scroll_width, inner_width = page_width(page)
        assert scroll_width <= inner_width, (
            f"{path} is {scroll_width} px wide at {width_px} px: {page.evaluate(OVERFLOWING)}"
        )


@pytest.mark.parametrize("width_px", WIDTHS_PX[1:])
def test_a_jobs_reveal_buttons_stay_inside_their_card(
    page: Page, dashboard: Dashboard, scenario: Scenario, width_px: int
) -> None:
    page.set_viewport_size({"width": width_px, "height": 900})
    sign_in(page, dashboard, dashboard.admin_token, f"/jobs/{scenario.long_failure}")
    card = page.locator("section.panel").filter(has=page.locator("table.attempts"))
    buttons = card.get_by_role("button", name="Reveal error")
    expect(buttons).to_have_count(2)  # two executions, both failed
    box = card.bounding_box()
    assert box is not None
    for n in range(2):
        button = buttons.nth(n).bounding_box()
        assert button is not None
        assert box["x"] <= button["x"] and button["x"] + button["width"] <= box["x"] + box["width"], (
            f"the Reveal button ({button}) leaves its card ({box}) at {width_px} px"
        )


def test_an_exception_type_shows_its_class_name_not_a_private_module(
    page: Page, dashboard: Dashboard, scenario: Scenario
) -> None:
    sign_in(page, dashboard, dashboard.tokens["read"], f"/jobs/{scenario.permanent}")
    shown = page.locator("table.attempts [data-exception-type]")
    expect(shown).to_have_text("PermanentJobFailure")
    expect(shown).to_have_attribute("title", "worker_sdk._errors.PermanentJobFailure")  # as recorded
    expect(page.locator("main")).not_to_contain_text("_errors")


def test_the_age_of_the_oldest_waiting_job_is_counted_in_the_browser(
    page: Page, dashboard: Dashboard, scenario: Scenario
) -> None:
    sign_in(page, dashboard, dashboard.tokens["read"])
    age = r"^(\d+ ms|\d+\.\d s|\d+m \d\ds|\d+h \d\dm|\d+d \d+h)$"
    expect(page.locator("[data-oldest] time[data-age]")).to_have_text(re.compile(age))
    row = page.locator(f'tr[data-queue="{LONG_QUEUE}"]')
    expect(row.locator("time[data-age]")).to_have_text(re.compile(age))
    # The live region is replaced by a fresh fragment when data changes: ages stay shown.
    with dashboard.client() as client:
        client.configure_job(Echo).with_queue(LONG_QUEUE)
        client.enqueue(Echo("one more"))
    expect(row.locator('[data-state="available"]')).to_have_text("2")
    expect(row.locator("time[data-age]")).to_have_text(re.compile(age))


def test_the_docs_screenshot_is_taken_from_this_run(
    page: Page, dashboard: Dashboard, scenario: Scenario
) -> None:
    """docs/dashboard.md describes this picture: the overview at 1400 px after the
    worker ran the scenario's jobs (succeeded and failed ones, one waiting)."""
    page.set_viewport_size({"width": 1400, "height": 900})
    sign_in(page, dashboard, dashboard.admin_token)
    expect(page.locator('[data-count="failed"]')).not_to_have_text("0")
    expect(page.locator("[data-workers]")).to_have_text("1")
    taken = dashboard.shots / f"docs-overview-{uuid.uuid4().hex[:6]}.png"
    page.screenshot(path=str(taken), full_page=True)
    assert taken.stat().st_size > 0
    if UPDATE_SCREENSHOTS:
        shutil.copyfile(taken, DOCS / "dashboard.png")
