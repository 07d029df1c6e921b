"""The dashboard's queue views over a real coordinator: the queues page and the overview
show one bounded page of queues, never all of them, with a link to the next page; the
overview's totals still count every queue; an action on a later page returns there."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.dashboard.views import PAGE_SIZE
from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.records import NewJobSpec
from coordinator.process import RunningCoordinator, start_coordinator
from tests.contract.harness import OPERATOR
from tests.integration.rawstream import RawWorker
from tests.integration.test_dashboard_http import Session

QUEUES = PAGE_SIZE + 5
ROW = re.compile(r'<tr data-queue="([^"]+)"')
NEXT = re.compile(r'<a href="([^"]+)" rel="next">')


@pytest.fixture
async def running(database_url: str) -> AsyncIterator[RunningCoordinator]:
    config = CoordinatorConfig(database_url=database_url, port=0, dashboard_port=0, drain_timeout_s=1)
    coordinator = await start_coordinator(config)
    # Names whose code-point order is their number's order: q00, q01, ... q54.
    await coordinator.app.enqueue([NewJobSpec("tests.echo", b"{}", queue=f"q{n:02d}") for n in range(QUEUES)])
    yield coordinator
    await coordinator.stop(grace_s=1)


def _session(running: RunningCoordinator) -> Session:
    assert running.dashboard_port is not None
    return Session(running.dashboard_port)


async def test_the_queues_page_shows_a_page_of_queues_and_links_the_next(running: RunningCoordinator) -> None:
    session = _session(running)
    first = await session.get("/queues")
    assert first.status == 200
    assert ROW.findall(first.body) == [f"q{n:02d}" for n in range(PAGE_SIZE)]
    found = NEXT.search(first.body)
    assert found is not None
    second = await session.get(html.unescape(found.group(1)))
    assert ROW.findall(second.body) == [f"q{n:02d}" for n in range(PAGE_SIZE, QUEUES)]
    assert NEXT.search(second.body) is None and 'href="/queues">First page' in second.body

    bad = await session.get("/queues?page=forged")
    assert bad.status == 400


async def test_the_queues_page_shows_each_rate(running: RunningCoordinator) -> None:
    await running.app.set_queue_rate("q01", 100, 60_000, True, OPERATOR)
    page = (await _session(running).get("/queues")).body
    rates = dict(re.findall(r'<tr data-queue="([^"]+)".*?<td data-rate>([^<]*)</td>', page, re.S))
    assert (rates["q00"], rates["q01"]) == ("none", "100/1m per key")


async def test_an_action_on_a_later_page_returns_to_that_page(running: RunningCoordinator) -> None:
    session = _session(running)
    first = await session.get("/queues")
    found = NEXT.search(first.body)
    assert found is not None
    later = html.unescape(found.group(1))
    csrf = await session.csrf(later)
    done = await session.post(f"/queues/q{QUEUES - 1}/pause", {"csrf": csrf, "next": later})
    assert done.status == 303
    location = done.header("location") or ""
    assert location.startswith(later + "&notice=paused")
    page, _ = await running.app.list_queues(page_size=1, page_token="")
    assert not page[0].queue.paused  # only the one asked for


async def test_the_overview_lists_one_page_of_queues_and_totals_every_queue(
    running: RunningCoordinator,
) -> None:
    page = await _session(running).get("/")
    assert page.status == 200
    assert len(ROW.findall(page.body)) == PAGE_SIZE
    assert f'data-count="available">{QUEUES}<' in page.body
    assert f"The first {PAGE_SIZE} of {QUEUES} queues" in page.body
    assert 'href="/queues?page=' in page.body


async def test_the_queues_page_shows_the_per_key_limit_and_the_job_page_its_key(
    running: RunningCoordinator,
) -> None:
    """docs/flow-control.md: a queue's per-key limit and a job's concurrency key are shown."""
    [made] = await running.app.enqueue(
        [NewJobSpec("tests.echo", b"{}", queue="q00", concurrency_key="tenant:7")]
    )
    await running.app.set_queue_key_limit("q00", 3, SYSTEM_ACTOR)
    session = _session(running)
    queues = await session.get("/queues")
    assert '<td class="num" data-key-limit>3</td>' in queues.body
    assert queues.body.count('<td class="num" data-key-limit>none</td>') == PAGE_SIZE - 1
    assert queues.body.count("<td data-keys>none</td>") == PAGE_SIZE - 1
    assert "<td data-keys>0 active</td>" in queues.body
    await running.app.set_queue_key_limit("q00", 1, SYSTEM_ACTOR)
    await running.app.set_queue_rate("q00", 1, 60_000, True, SYSTEM_ACTOR)
    await running.app.enqueue([NewJobSpec("tests.echo", b"{}", queue="q00", concurrency_key="tenant:7")])
    worker = RawWorker(running.target, "keyed", ["tests.echo"], queues=["q00"], capacity=2)
    try:
        for _ in range(2):  # one of each key: at its limit of 1, its window full (reserved)
            await worker.claim()
        queues = await session.get("/queues")
        shown = "2 active · 2 full: (no key), tenant:7 · 2 at rate: (no key), tenant:7"
        assert f"<td data-keys>{shown}</td>" in queues.body
    finally:
        await worker.close()
    job = await session.get(f"/jobs/{made.job_id}")
    assert '<dd class="mono" data-concurrency-key>tenant:7</dd>' in job.body
