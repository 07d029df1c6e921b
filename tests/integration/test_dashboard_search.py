"""The jobs search of the dashboard (``/jobs``) over plain HTTP against a real
coordinator (port 0) on both engines: job ID prefix, exact idempotency and unique keys,
payload text within its bounded window, created and finished time ranges, the three
sorts in both orders, paging, and bad input answered with a clear message (400) that
reads nothing and changes nothing."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest

from coordinator.config import CoordinatorConfig, DashboardLimits
from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.clock import OffsetClock
from coordinator.domain.records import NewJobSpec
from coordinator.process import start_coordinator
from tests.integration.test_dashboard_http import Dashboard, Session, _fail_one

HOUR_MS = 3_600_000
WINDOW = 6
"""The search window of these tests: small, so that its bound shows with a few jobs."""
LISTED = re.compile(r'<tr data-job="([0-9a-f-]{36})"')


@pytest.fixture
async def site(database_url: str) -> AsyncIterator[tuple[Dashboard, OffsetClock]]:
    limits = DashboardLimits(search_window_jobs=WINDOW, search_text_window_jobs=WINDOW, bulk_count_cap=5)
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        dashboard_port=0,
        auth_enabled=True,
        drain_timeout_s=1,
        dashboard_limits=limits,
    )
    clock = OffsetClock()
    running = await start_coordinator(config, clock=clock)
    tokens = {}
    for name, scopes in {"read": ["read"], "manage": ["read", "manage"]}.items():
        tokens[name] = (await running.app.create_token(f"dash-{name}", scopes, [], SYSTEM_ACTOR)).token
    yield Dashboard(running, tokens), clock
    await running.stop(grace_s=1)


async def _enqueue(site: Dashboard, **spec: object) -> str:
    payload = spec.pop("payload", b'{"n": 1}')
    wire_name = spec.pop("wire_name", "tests.echo")
    enqueued = await site.running.app.enqueue([NewJobSpec(str(wire_name), payload, **spec)])  # type: ignore[arg-type]
    return enqueued[0].job_id


async def _listed(session: Session, **query: str) -> list[str]:
    page = await session.get("/jobs?" + urlencode(query))
    assert page.status == 200, page.body[:500]
    return LISTED.findall(page.body)


async def test_search_by_id_prefix_keys_and_payload_text(site: tuple[Dashboard, OffsetClock]) -> None:
    dashboard, _ = site
    keyed = await _enqueue(dashboard, idempotency_key="order-77", queue="billing")
    other_queue = await _enqueue(dashboard, idempotency_key="order-77", queue="mail")
    unique = await _enqueue(dashboard, unique_key="user-5")
    texted = await _enqueue(dashboard, payload=b'{"customer": "Zoe-Quinn"}')
    session = await dashboard.session("read")

    assert await _listed(session, id_prefix=keyed) == [keyed]
    prefix = keyed[:10].upper().replace("-", "")  # any case, hyphens optional
    assert keyed in await _listed(session, id_prefix=prefix)
    assert set(await _listed(session, key="order-77")) == {keyed, other_queue}  # keys are per queue
    assert await _listed(session, key="order-77", queue="mail") == [other_queue]
    assert await _listed(session, key="order-7") == []  # exact, not a prefix
    assert await _listed(session, unique_key="user-5") == [unique]
    assert await _listed(session, text="Zoe-Quinn") == [texted]
    assert await _listed(session, text="zoe-quinn") == []  # case-sensitive
    assert await _listed(session, text="%") == []  # no wildcards
    texted_page = await session.get("/jobs?text=Zoe-Quinn")
    assert "data-not-live" in texted_page.body and "data-live=" not in texted_page.body  # no polling
    assert "data-live=" in (await session.get("/jobs?unique_key=user-5")).body


async def test_a_payload_text_search_reads_a_bounded_window_per_page_and_pages_on(
    site: tuple[Dashboard, OffsetClock],
) -> None:
    dashboard, _ = site
    oldest = await _enqueue(dashboard, payload=b'{"needle": "FIND-ME"}')
    for _ in range(WINDOW + 2):
        await _enqueue(dashboard)
    session = await dashboard.session("read")

    first = await session.get("/jobs?" + urlencode({"text": "FIND-ME"}))

    # The first page looked at the newest WINDOW jobs only, found nothing, and says so.
    assert first.status == 200 and LISTED.findall(first.body) == []
    assert "data-window" in first.body and f"newest {WINDOW} jobs" in first.body
    further = re.search(r'href="(/jobs\?[^"]*page=[^"]+)" rel="next"', first.body)
    assert further is not None
    second = await session.get(further.group(1).replace("&amp;", "&"))
    assert LISTED.findall(second.body) == [oldest]


async def test_time_ranges_and_every_sort(site: tuple[Dashboard, OffsetClock]) -> None:
    dashboard, clock = site
    clock.offset_ms -= 3 * HOUR_MS
    old = await _enqueue(dashboard, run_at_ms=clock.now_ms() + 10 * HOUR_MS)
    clock.offset_ms += 2 * HOUR_MS
    middle = await _enqueue(dashboard)
    await _fail_one_async(dashboard)  # the oldest available job: middle (old is scheduled)
    clock.offset_ms += HOUR_MS
    new = await _enqueue(dashboard)
    now = clock.now_ms()
    session = await dashboard.session("read")

    def iso(ms: int) -> str:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")

    assert await _listed(session) == [new, middle, old]
    assert await _listed(session, order="asc") == [old, middle, new]
    assert await _listed(session, created_after=iso(now - 2 * HOUR_MS)) == [new, middle]
    assert await _listed(session, created_before=iso(now - 2 * HOUR_MS) + "Z") == [old]
    assert await _listed(session, finished_after=iso(now - 2 * HOUR_MS)) == [middle]
    assert await _listed(session, finished_before=iso(now - 2 * HOUR_MS)) == []
    assert await _listed(session, sort="run_at") == [old, new, middle]
    assert await _listed(session, sort="run_at", order="asc") == [middle, new, old]
    assert (await _listed(session, sort="finished"))[0] == middle  # unfinished last


async def _fail_one_async(dashboard: Dashboard) -> None:
    import asyncio

    await asyncio.to_thread(_fail_one, dashboard.running, "failed on purpose")


async def test_pages_of_a_search_continue_where_the_last_ended(site: tuple[Dashboard, OffsetClock]) -> None:
    dashboard, _ = site
    ids = sorted([await _enqueue(dashboard) for _ in range(55)])  # IDs of one millisecond: random order
    session = await dashboard.session("read")
    first = await session.get("/jobs?" + urlencode({"wire_name": "tests.echo"}))
    assert LISTED.findall(first.body) == ids[::-1][:50]
    link = re.search(r'href="(/jobs\?[^"]*)" rel="next"', first.body)
    assert link is not None
    second = await session.get(link.group(1).replace("&amp;", "&"))
    assert LISTED.findall(second.body) == ids[::-1][50:]

    sorted_first = await session.get("/jobs?" + urlencode({"sort": "run_at", "order": "asc"}))
    # Sorted by run time: one window (the newest WINDOW jobs), sorted, and said so.
    assert set(LISTED.findall(sorted_first.body)) == set(ids[-WINDOW:])
    assert "sorted those only" in sorted_first.body


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"id_prefix": "0193xyz"}, "is not the start of a job ID"),
        ({"id_prefix": "0" * 40}, "is not the start of a job ID"),
        ({"created_after": "yesterday"}, "is not a date and time"),
        ({"finished_before": "2026-13-40"}, "is not a date and time"),
        ({"created_after": "2026-12-06T10:00", "created_before": "2026-12-06T09:00"}, "range is empty"),
        ({"text": "x" * 201}, "the limit is 200"),
        ({"key": "k" * 257}, "the limit is 256"),
        ({"unique_key": "u" * 2_000}, "at most 1000"),
        ({"sort": "payload"}, "is not a sort"),
        ({"order": "sideways"}, "is not an order"),
        ({"state": "lost"}, "unknown state"),
        ({"queue": "no spaces"}, "queue"),
        ({"page": "not-a-cursor"}, "is not a page token of this search"),
        ({"sort": "run_at", "page": "999999"}, "is not a page token of this search"),
    ],
)
async def test_bad_search_input_gets_a_clear_message_and_400(
    site: tuple[Dashboard, OffsetClock], query: dict[str, str], message: str
) -> None:
    dashboard, _ = site
    job_id = await _enqueue(dashboard)
    session = await dashboard.session("read")

    page = await session.get("/jobs?" + urlencode(query))
    fragment = await session.get("/jobs?" + urlencode({**query, "fragment": "1"}))

    assert page.status == 400 and "data-search-error" in page.body and message in page.body, page.body[:3000]
    assert LISTED.findall(page.body) == []
    assert 'role="search"' in page.body  # the form stays, to correct the field
    for value in query.values():
        assert html.escape(value[:1_000]) in page.body  # as typed
    assert fragment.status == 400 and message in fragment.body and "<html" not in fragment.body
    assert (await dashboard.running.app.get_job(job_id)).state.value == "available"


async def test_a_bulk_count_by_wire_name_reads_a_bounded_number_of_jobs(
    site: tuple[Dashboard, OffsetClock],
) -> None:
    dashboard, _ = site
    for _ in range(7):
        await _enqueue(dashboard, wire_name="tests.many")
    session = await dashboard.session("manage")

    capped = await session.get("/jobs/bulk/cancel?" + urlencode({"wire_name": "tests.many"}))
    exact = await session.get("/jobs/bulk/cancel?" + urlencode({"queue": "default"}))

    # bulk_count_cap is 5 here: the count stops there and says so; a queue's is exact.
    assert (
        capped.status == 200
        and 'data-bulk-count="5"' in capped.body
        and "of the newest 5 jobs" in capped.body
    )
    assert 'data-bulk-count="7"' in exact.body and "of the newest" not in exact.body
    done = await session.post("/jobs/bulk/cancel", {"csrf": await session.csrf(), "wire_name": "tests.many"})
    assert done.status == 303 and "count=7" in (done.header("location") or "")  # all are acted on
