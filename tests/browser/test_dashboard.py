"""The dashboard in headless Chromium against a real coordinator and worker process:
sign-in (a wrong token is refused), live counts while the worker runs jobs, retrying a
failed job until it succeeds, revealing its error (refused without ``reveal``, audited),
cancelling a running job, pausing and resuming a queue, and an action without its CSRF
token refused. Every view is saved as a screenshot in the module's temporary directory.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import Dashboard
from tests.integration.worker_app import AlwaysFails, BlockUntil, Echo, FailsUntilFile
from worker_sdk import JobState

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def sign_in(page: Page, dashboard: Dashboard, token: str, path: str = "/") -> None:
    """Signs in with the keyboard: the Token field, Tab to "Sign in", Enter."""
    page.goto(dashboard.url + path)
    expect(page).to_have_url(re.compile(r"/signin"))
    page.get_by_label("Token").fill(token)
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Sign in")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="Overview")).to_be_visible()


def shot(page: Page, dashboard: Dashboard, name: str) -> Path:
    path = dashboard.shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_a_wrong_token_is_refused_and_a_read_token_signs_in(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/jobs")
    expect(page).to_have_url(re.compile(r"/signin\?next=%2Fjobs"))
    shot(page, dashboard, "signin")
    page.get_by_label("Token").fill("rwk_0123456789abcdef_not-a-real-secret")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Unknown or revoked token.")
    expect(page).to_have_url(re.compile(r"/signin"))

    page.get_by_label("Token").fill(dashboard.tokens["read"])
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(dashboard.url + "/jobs")  # back where it was going
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/signin"))
    page.goto(dashboard.url + "/jobs")
    expect(page).to_have_url(re.compile(r"/signin"))


def test_counts_change_live_as_the_worker_runs_jobs(page: Page, dashboard: Dashboard, tmp_path: Path) -> None:
    sign_in(page, dashboard, dashboard.tokens["read"])
    release = tmp_path / "release"
    with dashboard.client() as client:
        client.wait(client.enqueue(Echo("warm")), timedelta(seconds=30))  # the queue exists, the worker is up
        page.reload()
        running = page.locator('[data-count="running"]')
        expect(running).to_have_text("0")
        held = [client.enqueue(BlockUntil(str(tmp_path / f"started-{n}"), str(release))) for n in range(3)]
        expect(running).to_have_text("3")  # no reload: the live region refreshes
        expect(page.locator("[data-workers]")).to_have_text("1")
        shot(page, dashboard, "overview-running")
        release.touch()
        for job_id in held:
            assert client.wait(job_id, timedelta(seconds=30)).state is JobState.SUCCEEDED
        expect(running).to_have_text("0")
    expect(page.locator("[data-succeeded]")).not_to_have_text("0")
    shot(page, dashboard, "overview")
    page.get_by_role("link", name="Workers", exact=True).click()
    expect(page.get_by_role("heading", name="Connected to this coordinator")).to_be_visible()
    expect(page.locator("[data-worker]")).to_have_count(1)
    shot(page, dashboard, "workers")


def test_a_failed_job_is_retried_and_succeeds(page: Page, dashboard: Dashboard, tmp_path: Path) -> None:
    marker = tmp_path / "present"
    with dashboard.client() as client:
        client.configure_job(FailsUntilFile).with_max_executions(1)
        job_id = client.enqueue(FailsUntilFile(str(marker)))
        assert client.wait(job_id, timedelta(seconds=30)).state is JobState.FAILED
    sign_in(page, dashboard, dashboard.tokens["manage"], "/failed")
    row = page.locator(f'tr[data-job="{job_id}"]')
    expect(row).to_contain_text("InventoryError")
    shot(page, dashboard, "failed")

    row.get_by_role("link", name=job_id).click()
    expect(page).to_have_url(f"{dashboard.url}/jobs/{job_id}")
    expect(page.locator("[data-job-state]")).to_have_text("failed")
    expect(page.locator('pre[data-blob="payload"]')).to_contain_text(str(marker))
    expect(page.locator("table.attempts")).to_contain_text("retryable_failure")
    marker.touch()
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Retried")
    expect(page.locator("[data-job-state]")).to_have_text("succeeded")  # live, no reload
    expect(page.locator('pre[data-blob="output"]')).to_have_text("found it in generation 2")
    expect(page.locator('table[data-generation="1"]')).to_be_visible()  # the first generation stays
    shot(page, dashboard, "job")


def test_revealing_an_error_needs_the_reveal_scope_and_is_audited(
    browser_page_pair: tuple[Page, Page], dashboard: Dashboard
) -> None:
    without, with_reveal = browser_page_pair
    with dashboard.client() as client:
        client.configure_job(AlwaysFails).with_max_executions(1)
        job_id = client.enqueue(AlwaysFails("reveal me"))
        assert client.wait(job_id, timedelta(seconds=30)).state is JobState.FAILED
        attempt_id = client.attempts(job_id)[0].id

    sign_in(without, dashboard, dashboard.tokens["manage"], f"/jobs/{job_id}")
    expect(without.locator("body")).not_to_contain_text(
        "secret-ish detail"
    )  # plain reads: code and type only
    # No button it may not press; posting the form anyway is refused by the server.
    expect(without.get_by_role("button", name="Reveal error")).to_have_count(0)
    csrf = without.locator('input[name="csrf"]').first.get_attribute("value")
    refused = without.request.post(f"{dashboard.url}/attempts/{attempt_id}/reveal", form={"csrf": csrf or ""})
    assert refused.status == 403
    assert "lacks the &#39;reveal&#39; scope" in refused.text()

    sign_in(with_reveal, dashboard, dashboard.tokens["reveal"], f"/jobs/{job_id}")
    with_reveal.get_by_role("button", name="Reveal error").click()
    expect(with_reveal.locator("[data-revealed-message]")).to_have_text("secret-ish detail for execution 1")
    expect(with_reveal.locator("[data-revealed-detail]")).to_contain_text("InventoryError")
    shot(with_reveal, dashboard, "job-revealed")

    without.goto(dashboard.url + "/audit")
    expect(without.get_by_role("alert")).to_contain_text("lacks the 'admin' scope")
    without.get_by_role("button", name="Sign out").click()
    sign_in(without, dashboard, dashboard.admin_token, "/audit")
    event = without.locator('tr[data-action="attempt.reveal_error"]').filter(has_text=attempt_id)
    expect(event).to_have_count(1)
    expect(event).to_contain_text("browser-reveal")
    expect(event).to_contain_text("(dashboard)")
    shot(without, dashboard, "audit")


def test_a_running_job_is_cancelled(page: Page, dashboard: Dashboard, tmp_path: Path) -> None:
    started = tmp_path / "started"
    with dashboard.client() as client:
        job_id = client.enqueue(BlockUntil(str(started), str(tmp_path / "never")))
        sign_in(page, dashboard, dashboard.tokens["manage"], f"/jobs/{job_id}")
        expect(page.locator("[data-job-state]")).to_have_text("running")
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_role("status")).to_contain_text("Cancel sent")
        expect(page.locator("[data-job-state]")).to_have_text("cancelled")
        assert client.get(job_id).state is JobState.CANCELLED
    expect(page.locator("table.attempts")).to_contain_text("cancelled")


def test_a_queue_is_paused_and_resumed(page: Page, dashboard: Dashboard) -> None:
    sign_in(page, dashboard, dashboard.tokens["manage"], "/queues")
    row = page.locator('tr[data-queue="default"]')
    row.get_by_role("button", name="Pause").click()
    expect(row.locator("[data-status]")).to_have_text("paused")
    with dashboard.client() as client:
        assert client.list_queues()[0].paused
        held = client.enqueue(Echo("held"))
        expect(row.locator('[data-state="available"]')).to_have_text("1")
        shot(page, dashboard, "queues-paused")
        assert client.get(held).state is JobState.AVAILABLE
        row.get_by_role("button", name="Resume").click()
        expect(row.locator("[data-status]")).to_have_text("active")
        assert client.wait(held, timedelta(seconds=30)).state is JobState.SUCCEEDED
        row.get_by_label("Concurrency limit of queue default").fill("3")
        row.get_by_role("button", name="Set limit").click()
        expect(page.get_by_role("status")).to_contain_text("limit")
        assert client.list_queues()[0].concurrency_limit == 3
        row.get_by_role("button", name="Remove limit").click()
        expect(row.get_by_role("button", name="Remove limit")).to_have_count(0)
    shot(page, dashboard, "queues")


def test_an_action_without_its_csrf_token_is_refused_and_a_revoked_token_ends_the_session(
    page: Page, dashboard: Dashboard
) -> None:
    with dashboard.client() as client:
        created = client.create_token("browser-short-lived", ["read", "manage"])
        client.create_schedule(
            f"nightly-{uuid.uuid4().hex[:6]}",
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            wire_name="tests.echo",
            payload=b'{"text": "tick"}',
        )
    sign_in(page, dashboard, created.secret, "/schedules")
    expect(page.locator("[data-schedule]").first).to_contain_text("30 2 * * *")
    shot(page, dashboard, "schedules")

    # The session cookie rides along (same origin), the form's CSRF token does not.
    refused = page.request.post(dashboard.url + "/queues/default/pause", form={"next": "/queues"})
    assert refused.status == 403
    assert "CSRF" in refused.text()
    forged = page.request.post(dashboard.url + "/queues/default/pause", form={"csrf": "x" * 43})
    assert forged.status == 403
    with dashboard.client() as client:
        assert not client.list_queues()[0].paused
        client.revoke_token(created.token.id)
    page.goto(dashboard.url + "/queues")
    expect(page).to_have_url(re.compile(r"/signin"))


@pytest.fixture
def browser_page_pair(page: Page, browser: Browser) -> Iterator[tuple[Page, Page]]:
    """Two pages of separate contexts: two operators, two sessions."""
    other = browser.new_context(viewport={"width": 1360, "height": 900})
    other.set_default_timeout(20_000)
    yield page, other.new_page()
    other.close()
