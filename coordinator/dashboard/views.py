"""The dashboard's pages and actions, each a thin adapter over one or a few facade calls.

Every page has a stable URL; its live part is the same URL with ``fragment=1`` (polled
with an ETag by ``static/dashboard.js``). Lists never carry payloads or error text, and
every count comes from the maintained queue counts, never from counting jobs. An action
redirects back (``next``, a local path) with a ``notice`` naming what was done.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from coordinator.dashboard.requests import Host, View, Visitor, is_fragment, local_path
from coordinator.domain.access import Scope
from coordinator.domain.graph import timeline
from coordinator.domain.progress import decode_progress
from coordinator.domain.records import AttemptRecord
from coordinator.domain.states import JobState
from coordinator.errors import CoordinatorError, InvalidArgument

PAGE_SIZE = 50
QUEUE_OPTIONS = 200
"""Most queue names the job filter offers (one page of queues): a queue further on is
reached from the queues page, whose names link to its jobs."""
OPEN_STATES = (
    JobState.AVAILABLE,
    JobState.SCHEDULED,
    JobState.WAITING,
    JobState.RESERVED,
    JobState.RUNNING,
)
ENDED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
NOTICE_PARAMS = frozenset({"notice", "count", "requested", "refused", "job"})
NOTICES = {
    "retried": "Retried: the job runs again as a new generation.",
    "cancelled": "Cancel sent: the job is cancelled, or its worker has been told to stop it.",
    "paused": "Paused: no new claims from this queue until it is resumed; running jobs finish.",
    "resumed": "Resumed: workers claim from this queue again.",
    "limited": "Concurrency limit changed.",
    "schedule_paused": "Schedule paused: no ticks run until it is resumed.",
    "schedule_resumed": "Schedule resumed from its next tick.",
    "schedule_created": "Schedule created: its first job is enqueued at its next tick.",
    "schedule_deleted": "Schedule deleted; the jobs it enqueued stay.",
    "schedule_run": "Enqueued a job from the schedule to run now.",
}


def _show(d: Host, request: Request, visitor: Visitor, page: str, live: str, **values: Any) -> Response:
    """The whole page, or (``fragment=1``) only its live part."""
    context = d.context(request, visitor, notice=notice_for(request), **values)
    if is_fragment(request):
        return d.renderer.fragment(request, live, context)
    return d.renderer.page(page, context)


def notice_for(request: Request) -> str | None:
    name = request.query_params.get("notice")
    if name == "retried_many":
        count, refused = _int(request.query_params.get("count")), _int(request.query_params.get("refused"))
        text = f"Retried {count} job{'s' if count != 1 else ''}."
        return text + (f" {refused} could not be retried (no longer failed)." if refused else "")
    if name in ("bulk_cancel", "bulk_retry", "bulk_purge"):
        return _bulk_notice(name, request)
    return NOTICES.get(name or "")


def _bulk_notice(name: str, request: Request) -> str:
    count, refused = _int(request.query_params.get("count")), _int(request.query_params.get("refused"))
    plural = "s" if count != 1 else ""
    if name == "bulk_retry":
        text = f"Retried {count} job{plural}."
    elif name == "bulk_purge":
        text = f"Purged {count} job{plural}."
    else:
        requested = _int(request.query_params.get("requested"))
        text = f"Cancelled {count} job{plural}."
        text += (
            f" Asked the workers of {requested} running job{'s' if requested != 1 else ''} to stop."
            if requested
            else ""
        )
    return text + (f" {refused} skipped (changed meanwhile; see the audit log)." if refused else "")


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() and len(value) < 10 else 0


def parse_state(value: str | None) -> JobState | None:
    if not value:
        return None
    try:
        return JobState(value)
    except ValueError:
        known = ", ".join(s.value for s in JobState)
        raise InvalidArgument("state", f"unknown state {value!r}; one of {known}") from None


def _text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value or None


async def form_text(request: Request, name: str) -> str | None:
    value = (await request.form()).get(name)
    return value.strip() or None if isinstance(value, str) else None


async def back_to(request: Request, default: str, notice: str, **extra: object) -> Response:
    """303 to the form's ``next`` (a local path, else ``default``) with ``notice``; the
    notice of an earlier action in that URL is dropped, so they do not pile up."""
    path, _, query = local_path(await form_text(request, "next") or default).partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in NOTICE_PARAMS]
    added = [("notice", notice), *((k, str(v)) for k, v in extra.items())]
    return RedirectResponse(f"{path}?{urlencode([*kept, *added])}", status_code=303)


# -- overview --------------------------------------------------------------------------


async def overview(d: Host, request: Request, visitor: Visitor) -> Response:
    # One page of queues, never all of them; the totals are sums over every queue.
    queues, more = await d.app.list_queues(page_size=PAGE_SIZE)
    known, totals = await d.app.job_totals()
    throughput = await d.app.throughput()
    holders = await d.app.lease_holders(100)
    due = [s.oldest_due_run_at_ms for s in queues if s.oldest_due_run_at_ms is not None]
    return _show(
        d,
        request,
        visitor,
        "overview.html",
        "overview_live.html",
        queues=queues,
        queues_known=known,
        more_queues_url="/queues?" + urlencode({"page": more}) if more else None,
        totals=totals,
        throughput=throughput,
        # A time, not an age: the page counts the age up itself, so the live part's bytes
        # (and ETag) change only when the data does.
        oldest_due_ms=min(due) if due else None,
        workers=d.app.connected_workers(),
        holders=holders,
        open_states=OPEN_STATES,
        ended_states=ENDED_STATES,
    )


# -- jobs ------------------------------------------------------------------------------


async def failed(d: Host, request: Request, visitor: Visitor) -> Response:
    """Failed jobs, newest first, by queue and wire name (``/jobs`` searches the rest)."""
    queue, wire_name, page = _text(request, "queue"), _text(request, "wire_name"), _text(request, "page")
    listed, next_page = await d.app.list_jobs(
        queue=queue, state=JobState.FAILED, wire_name=wire_name, page_size=PAGE_SIZE, page_token=page or ""
    )
    filters = {k: v for k, v in (("queue", queue), ("wire_name", wire_name)) if v}
    offered, _ = await d.app.list_queues(page_size=QUEUE_OPTIONS)
    queue_names = [s.queue.name for s in offered]
    if queue and queue not in queue_names:
        queue_names.append(queue)  # the filter in use stays shown
    return _show(
        d,
        request,
        visitor,
        "failed.html",
        "failed_live.html",
        jobs=listed,
        next_url=f"/failed?{urlencode({**filters, 'page': next_page})}" if next_page else None,
        first_url=f"/failed?{urlencode(filters)}" if page else None,
        queue=queue,
        wire_name=wire_name,
        queue_names=queue_names,
        here=str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""),
    )


async def go_to_job(d: Host, request: Request, visitor: Visitor) -> Response:
    job_id = _text(request, "id")
    if job_id is None:
        raise InvalidArgument("id", "enter a job ID")
    job = await d.app.get_job(job_id)  # InvalidArgument or NotFound: an error page saying so
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


async def job(d: Host, request: Request, visitor: Visitor) -> Response:
    return await _job_page(d, request, visitor, request.path_params["job_id"], revealed=None)


async def _job_page(
    d: Host, request: Request, visitor: Visitor, job_id: str, *, revealed: AttemptRecord | None
) -> Response:
    record = await d.app.get_job(job_id)
    graph = await d.app.job_neighbourhood(record)
    attempts = await d.app.list_attempts(record.id)
    bars, axis_from_ms, axis_to_ms = timeline(attempts)
    generations: dict[int, list[AttemptRecord]] = {}
    progress = None
    for attempt in attempts:
        generations.setdefault(attempt.generation, []).append(attempt)
        if attempt.id == record.current_attempt_id:
            progress = decode_progress(attempt.progress)
    return _show(
        d,
        request,
        visitor,
        "job.html",
        "job_live.html",
        job=record,
        graph=graph,
        bars=bars,
        axis_from_ms=axis_from_ms,
        axis_to_ms=axis_to_ms,
        generations=sorted(generations.items(), reverse=True),
        revealed=revealed,
        progress=progress,
        live_url=f"/jobs/{record.id}?fragment=1",
    )


async def retry_job(d: Host, request: Request, visitor: Visitor) -> Response:
    include = (await request.form()).get("include_dependents") == "on"
    record, _ = await d.app.retry(request.path_params["job_id"], visitor.actor, include_dependents=include)
    return await back_to(request, f"/jobs/{record.id}", "retried")


async def cancel_job(d: Host, request: Request, visitor: Visitor) -> Response:
    record = await d.app.cancel(request.path_params["job_id"], visitor.actor)
    return await back_to(request, f"/jobs/{record.id}", "cancelled")


async def reveal_error(d: Host, request: Request, visitor: Visitor) -> Response:
    """R-22: the attempt's message and full text, on this response only (``no-store``);
    the facade writes the audit event with the read."""
    attempt = await d.app.reveal_error(request.path_params["attempt_id"], visitor.actor)
    return await _job_page(d, request, visitor, attempt.job_id, revealed=attempt)


async def retry_failed(d: Host, request: Request, visitor: Visitor) -> Response:
    form = await request.form()
    ids = [value for value in form.getlist("id") if isinstance(value, str)][: d.app.bounds.max_page_size]
    if not ids:
        raise InvalidArgument("id", "select at least one job to retry")
    retried = refused = 0
    for job_id in ids:
        try:
            await d.app.retry(job_id, visitor.actor)
            retried += 1
        except CoordinatorError:
            refused += 1  # retried meanwhile by someone else, or purged
    return await back_to(request, "/failed", "retried_many", count=retried, refused=refused)


# -- queues ----------------------------------------------------------------------------


async def queues(d: Host, request: Request, visitor: Visitor) -> Response:
    page = _text(request, "page")
    listed, next_page = await d.app.list_queues(page_size=PAGE_SIZE, page_token=page or "")
    return _show(
        d,
        request,
        visitor,
        "queues.html",
        "queues_live.html",
        queues=listed,
        depths={stats.queue.name: d.app.queue_depths(stats.queue.name) for stats in listed},
        next_url=f"/queues?{urlencode({'page': next_page})}" if next_page else None,
        first_url="/queues" if page else None,
        here=f"/queues?{urlencode({'page': page})}" if page else "/queues",
        open_states=OPEN_STATES,
        ended_states=ENDED_STATES,
    )


async def pause_queue(d: Host, request: Request, visitor: Visitor) -> Response:
    await d.app.pause_queue(request.path_params["name"], visitor.actor)
    return await back_to(request, "/queues", "paused")


async def resume_queue(d: Host, request: Request, visitor: Visitor) -> Response:
    await d.app.resume_queue(request.path_params["name"], visitor.actor)
    return await back_to(request, "/queues", "resumed")


async def limit_queue(d: Host, request: Request, visitor: Visitor) -> Response:
    form = await request.form()
    raw = form.get("limit")
    text = raw.strip() if isinstance(raw, str) else ""
    if form.get("remove") == "1" or not text:
        limit = None
    elif text.isdigit() and len(text) < 10:
        limit = int(text)
    else:
        raise InvalidArgument("limit", f"{text!r} is not a whole number; leave it empty for no limit")
    await d.app.set_queue_limit(request.path_params["name"], limit, visitor.actor)
    return await back_to(request, "/queues", "limited")


# -- schedules, workers, audit ---------------------------------------------------------


async def schedules(d: Host, request: Request, visitor: Visitor) -> Response:
    page = _text(request, "page")
    listed, next_page = await d.app.list_schedules(page_size=PAGE_SIZE, page_token=page or "")
    return _show(
        d,
        request,
        visitor,
        "schedules.html",
        "schedules_live.html",
        schedules=listed,
        next_url=f"/schedules?{urlencode({'page': next_page})}" if next_page else None,
        first_url="/schedules" if page else None,
    )


async def pause_schedule(d: Host, request: Request, visitor: Visitor) -> Response:
    await d.app.pause_schedule(request.path_params["name"], visitor.actor)
    return await back_to(request, "/schedules", "schedule_paused")


async def resume_schedule(d: Host, request: Request, visitor: Visitor) -> Response:
    await d.app.resume_schedule(request.path_params["name"], visitor.actor)
    return await back_to(request, "/schedules", "schedule_resumed")


async def workers(d: Host, request: Request, visitor: Visitor) -> Response:
    return _show(
        d,
        request,
        visitor,
        "workers.html",
        "workers_live.html",
        workers=d.app.connected_workers(),
        holders=await d.app.lease_holders(500),
    )


async def audit(d: Host, request: Request, visitor: Visitor) -> Response:
    action, target, page = _text(request, "action"), _text(request, "target"), _text(request, "page")
    events, next_page = await d.app.list_audit_events(
        action=action, target=target, page_size=PAGE_SIZE, page_token=page or ""
    )
    filters = {k: v for k, v in (("action", action), ("target", target)) if v}
    return _show(
        d,
        request,
        visitor,
        "audit.html",
        "audit_live.html",
        events=events,
        action=action,
        target=target,
        next_url=f"/audit?{urlencode({**filters, 'page': next_page})}" if next_page else None,
        first_url=f"/audit?{urlencode(filters)}" if page else None,
    )


GET = ("GET",)
POST = ("POST",)
ROUTES: list[tuple[str, View, Scope, tuple[str, ...]]] = [
    ("/", overview, Scope.READ, GET),
    ("/jobs/go", go_to_job, Scope.READ, GET),
    ("/jobs/{job_id}", job, Scope.READ, GET),
    ("/jobs/{job_id}/retry", retry_job, Scope.MANAGE, POST),
    ("/jobs/{job_id}/cancel", cancel_job, Scope.MANAGE, POST),
    ("/attempts/{attempt_id}/reveal", reveal_error, Scope.REVEAL, POST),
    ("/failed", failed, Scope.READ, GET),
    ("/failed/retry", retry_failed, Scope.MANAGE, POST),
    ("/queues", queues, Scope.READ, GET),
    ("/queues/{name}/pause", pause_queue, Scope.MANAGE, POST),
    ("/queues/{name}/resume", resume_queue, Scope.MANAGE, POST),
    ("/queues/{name}/limit", limit_queue, Scope.MANAGE, POST),
    ("/schedules", schedules, Scope.READ, GET),
    ("/schedules/{name}/pause", pause_schedule, Scope.MANAGE, POST),
    ("/schedules/{name}/resume", resume_schedule, Scope.MANAGE, POST),
    ("/workers", workers, Scope.READ, GET),
    ("/audit", audit, Scope.ADMIN, GET),
]
"""(path, view, the scope it needs, methods): the API's scopes (R-21)."""
