"""The jobs list as a search (``/jobs``), and bulk cancel, retry and purge of what a filter
matches, each behind a confirmation that shows how many jobs it would touch.

A search's fields arrive as query parameters; each is read and bounded here (a field
too long is refused before it is parsed), then checked by the facade, which reads
nothing for a bad one. A refused search shows the page with the form, the message and
no results, with status 400 (a live fragment: 400 and the message as text).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from coordinator.app import JobFilter
from coordinator.dashboard.requests import Host, Visitor, is_fragment
from coordinator.dashboard.views import PAGE_SIZE, QUEUE_OPTIONS, back_to, form_text, notice_for, parse_state
from coordinator.domain.search import JobSearch, SortKey
from coordinator.domain.states import JobState
from coordinator.errors import InvalidArgument

MAX_FIELD_CHARS = 1_000
"""Longest query value read at all; the facade's own limits (keys 256, text 200) are
below it and give the precise message."""
TIME_FIELDS = ("created_after", "created_before", "finished_after", "finished_before")
TEXT_FIELDS = ("queue", "state", "wire_name", "id_prefix", "key", "unique_key", "text", *TIME_FIELDS)
BULK_VERBS = ("cancel", "retry")
"""The bulk actions of ``/jobs/bulk/{verb}`` (``manage``). Purge has routes of its own,
``/jobs/bulk/purge``, as it needs ``admin``: this route never purges."""


def _field(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "")
    if len(value) > MAX_FIELD_CHARS:
        raise InvalidArgument(
            name, f"is {len(value)} characters; a search field takes at most {MAX_FIELD_CHARS}"
        )
    return value.strip() or None


def _as_typed(request: Request) -> dict[str, str]:
    """The search's fields as the visitor typed them (each cut to ``MAX_FIELD_CHARS``),
    to refill the form of a refused search."""
    names = (*TEXT_FIELDS, "sort", "order")
    return {
        name: value[:MAX_FIELD_CHARS]
        for name in names
        if (value := request.query_params.get(name, "").strip())
    }


def parse_time(name: str, value: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 date or date and time; one without a
    zone is UTC (the dashboard shows every time in UTC)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise InvalidArgument(
            name, f"{value[:64]!r} is not a date and time; use 2026-12-06T14:30 (UTC) or 2026-12-06"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_search(request: Request) -> tuple[JobSearch, dict[str, str]]:
    """The search the query asks for, and its fields as given (to refill the form and
    build page links). InvalidArgument for a field that cannot be read."""
    given = {name: value for name in TEXT_FIELDS if (value := _field(request, name)) is not None}
    sort_text, order = _field(request, "sort") or "created", _field(request, "order") or "desc"
    try:
        sort = SortKey(sort_text)
    except ValueError:
        raise InvalidArgument(
            "sort", f"{sort_text[:64]!r} is not a sort; one of created, run_at, finished"
        ) from None
    if order not in ("asc", "desc"):
        raise InvalidArgument("order", f"{order[:64]!r} is not an order; asc or desc")
    if sort is not SortKey.CREATED or order != "desc":
        given.update(sort=sort.value, order=order)
    search = JobSearch(
        queue=given.get("queue"),
        state=parse_state(given.get("state")),
        wire_name=given.get("wire_name"),
        id_prefix=given.get("id_prefix"),
        idempotency_key=given.get("key"),
        unique_key=given.get("unique_key"),
        text=given.get("text"),
        created_after_ms=parse_time("created_after", given.get("created_after")),
        created_before_ms=parse_time("created_before", given.get("created_before")),
        finished_after_ms=parse_time("finished_after", given.get("finished_after")),
        finished_before_ms=parse_time("finished_before", given.get("finished_before")),
        sort=sort,
        descending=order == "desc",
    )
    return search, given


async def jobs(d: Host, request: Request, visitor: Visitor) -> Response:
    given: dict[str, str] = {}
    values: dict[str, Any] = {"jobs": [], "page": None, "search_error": None}
    status = 200
    try:
        search, given = parse_search(request)
        cursor = _field(request, "page") or ""
        page = await d.app.search_jobs(search, page_size=PAGE_SIZE, cursor=cursor)
    except InvalidArgument as exc:
        if is_fragment(request):
            return Response(str(exc), status_code=400, media_type="text/plain")
        values["search_error"], status = str(exc), 400
        given = _as_typed(request)
    else:
        values.update(
            jobs=page.jobs,
            page=page,
            next_url=f"/jobs?{urlencode({**given, 'page': page.next_cursor})}" if page.next_cursor else None,
            first_url=f"/jobs?{urlencode(given)}" if cursor else None,
            bulk=_bulk_links(search, given),
        )
    offered, _ = await d.app.list_queues(page_size=QUEUE_OPTIONS)
    queue_names = [s.queue.name for s in offered]
    if given.get("queue") and given["queue"] not in queue_names:
        queue_names.append(given["queue"])  # the filter in use stays shown
    context = d.context(
        request,
        visitor,
        notice=notice_for(request),
        given=given,
        queue_names=queue_names,
        states=list(JobState),
        sorts=list(SortKey),
        limits=d.app.config.dashboard_limits,
        advanced=any(name in given for name in ("key", "unique_key", "text", *TIME_FIELDS, "sort")),
        **values,
    )
    if is_fragment(request):
        return d.renderer.fragment(request, "jobs_live.html", context)
    return d.renderer.page("jobs.html", context, status)


def _bulk_links(search: JobSearch, given: dict[str, str]) -> dict[str, str] | None:
    """The confirmation pages of the bulk actions for this search, when it is a filter
    bulk operations take (queue, state and wire name only)."""
    if not search.only_bulk_fields:
        return None
    plain = {k: v for k, v in given.items() if k in ("queue", "state", "wire_name")}
    return {verb: f"/jobs/bulk/{verb}?{urlencode(plain)}" for verb in (*BULK_VERBS, "purge")}


def _bulk_filter(queue: str | None, state: str | None, wire_name: str | None) -> JobFilter:
    return JobFilter(queue=queue, state=parse_state(state), wire_name=wire_name)


def _verb(request: Request) -> str:
    verb = str(request.path_params["verb"])
    if verb not in BULK_VERBS:
        raise InvalidArgument("action", f"{verb[:64]!r} is not a bulk action; cancel or retry")
    return verb


async def bulk_confirm(d: Host, request: Request, visitor: Visitor) -> Response:
    """What a bulk cancel or retry would do, counted now, and the button that does it."""
    return await _confirm(d, request, visitor, _verb(request))


async def purge_confirm(d: Host, request: Request, visitor: Visitor) -> Response:
    """What a bulk purge would remove, counted now, and the button that does it."""
    return await _confirm(d, request, visitor, "purge")


async def bulk_run(d: Host, request: Request, visitor: Visitor) -> Response:
    """Runs the bulk cancel or retry (the facade audits each job as the API's bulk calls do)."""
    return await _run(d, request, visitor, _verb(request))


async def purge_run(d: Host, request: Request, visitor: Visitor) -> Response:
    """Runs the bulk purge (the facade audits it once, with the filter)."""
    return await _run(d, request, visitor, "purge")


async def _confirm(d: Host, request: Request, visitor: Visitor, verb: str) -> Response:
    names = {name: _field(request, name) for name in ("queue", "state", "wire_name")}
    job_filter = _bulk_filter(names["queue"], names["state"], names["wire_name"])
    count, capped = await d.app.bulk_count(job_filter, verb)
    given = {k: v for k, v in names.items() if v}
    context = d.context(
        request,
        visitor,
        verb=verb,
        given=given,
        described=job_filter.describe(),
        count=count,
        capped=capped,
        limits=d.app.config.dashboard_limits,
        back=f"/jobs?{urlencode(given)}",
    )
    return d.renderer.page("bulk_confirm.html", context)


async def _run(d: Host, request: Request, visitor: Visitor, verb: str) -> Response:
    names = {name: await form_text(request, name) for name in ("queue", "state", "wire_name")}
    job_filter = _bulk_filter(names["queue"], names["state"], names["wire_name"])
    if verb == "retry":
        include = (await request.form()).get("include_dependents") == "on"
        outcome = await d.app.bulk_retry(job_filter, visitor.actor, include_dependents=include)
    elif verb == "purge":
        outcome = await d.app.bulk_purge(job_filter, visitor.actor)
    else:
        outcome = await d.app.bulk_cancel(job_filter, visitor.actor)
    given = {k: v for k, v in names.items() if v}
    done = {"count": outcome.done, "requested": outcome.requested, "refused": outcome.skipped}
    response = await back_to(request, f"/jobs?{urlencode(given)}", f"bulk_{verb}", **done)
    assert isinstance(response, RedirectResponse)
    return response
