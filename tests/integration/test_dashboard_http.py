"""The dashboard over plain HTTP against a real coordinator (port 0) on both engines:
sign-in and its cookies, the scope of every route (the API's), CSRF on every action,
revoked tokens, the security headers, live fragments with ETags, lists without payloads
or error text, bad input answered with a clear page that changes nothing, TLS, and the
dashboard turned off. The browser tests (tests/browser) show the pages in Chromium."""

from __future__ import annotations

import asyncio
import http.client
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.dashboard.render import CONTENT_SECURITY_POLICY
from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import Unavailable
from coordinator.process import RunningCoordinator, start_coordinator
from coordinator.service.work import AttemptMessage, ClaimRequest, ResultReport, WorkBatch
from tests.integration.test_tls import Pki, pki  # noqa: F401  (the fixture)

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        return values[0] if values else None

    def cookies(self) -> list[str]:
        return [v for k, v in self.headers if k.lower() == "set-cookie"]


@dataclass
class Session:
    """A browser-like HTTP client: keeps cookies, follows no redirects."""

    port: int
    tls: ssl.SSLContext | None = None
    cookies: dict[str, str] = field(default_factory=dict)

    def _request(self, method: str, path: str, body: str | None, headers: Mapping[str, str]) -> Response:
        if self.tls is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                "127.0.0.1", self.port, context=self.tls, timeout=30
            )
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = dict(headers)
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=sent)
            raw = conn.getresponse()
            response = Response(raw.status, raw.getheaders(), raw.read().decode())
        finally:
            conn.close()
        for cookie in response.cookies():
            name, _, rest = cookie.partition("=")
            value = rest.split(";", 1)[0]
            if "Max-Age=0" in cookie or value in ('""', ""):
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return response

    async def get(self, path: str, **headers: str) -> Response:
        return await asyncio.to_thread(self._request, "GET", path, None, headers)

    async def post(self, path: str, form: Mapping[str, str | list[str]] | None = None) -> Response:
        return await asyncio.to_thread(self._request, "POST", path, urlencode(form or {}, doseq=True), {})

    async def sign_in(self, token: str, next_path: str = "/") -> Response:
        page = await self.get("/signin")
        nonce = CSRF.search(page.body)
        assert nonce is not None, page.body
        return await self.post("/signin", {"csrf": nonce.group(1), "token": token, "next": next_path})

    async def csrf(self, path: str = "/") -> str:
        page = await self.get(path)
        found = CSRF.search(page.body)
        assert page.status == 200 and found is not None, (page.status, page.body[:500])
        return found.group(1)


@dataclass
class Dashboard:
    running: RunningCoordinator
    tokens: dict[str, str]

    @property
    def port(self) -> int:
        port = self.running.dashboard_port
        assert port is not None
        return port

    async def session(self, scope: str | None = None) -> Session:
        session = Session(self.port)
        if scope is not None:
            signed = await session.sign_in(self.tokens[scope])
            assert signed.status == 303, signed.body
        return session

    async def enqueue(self, payload: bytes = b'{"text": "PAYLOAD-MARKER"}') -> str:
        enqueued = await self.running.app.enqueue([NewJobSpec("tests.echo", payload)])
        return enqueued[0].job_id

    async def audit_actions(self) -> list[str]:
        events, _ = await self.running.app.list_audit_events(
            action=None, target=None, page_size=100, page_token=""
        )
        return [e.action for e in events]


def _fail_one(running: RunningCoordinator, text: str) -> str:
    """Claims, starts and fails (permanently, with error text) the oldest available job,
    as a worker would; returns the attempt."""
    ops, worker = running.app.ops, WorkerIdentity("w")
    claim = ClaimRequest("w", ("default",), ("tests.echo",), 1, 60_000)
    attempt_id = ops.process(WorkBatch(claims=[claim])).claims[0][0].attempt_id
    ops.process(WorkBatch(starts=[AttemptMessage(attempt_id, worker)]))
    report = Report(Outcome.PERMANENT_FAILURE, "boom", "ValueError", text, f"Traceback ...\n{text}")
    ops.process(WorkBatch(results=[ResultReport(attempt_id, report, None, worker)]))
    return attempt_id


@pytest.fixture
async def dashboard(database_url: str) -> AsyncIterator[Dashboard]:
    config = CoordinatorConfig(
        database_url=database_url, port=0, dashboard_port=0, auth_enabled=True, drain_timeout_s=1
    )
    running = await start_coordinator(config)
    app = running.app
    tokens = {}
    for name, scopes in {
        "read": ["read"],
        "manage": ["read", "manage"],
        "reveal": ["read", "reveal"],
        "enqueue": ["enqueue"],
        "admin": ["read", "admin"],
    }.items():
        tokens[name] = (await app.create_token(f"dash-{name}", scopes, [], SYSTEM_ACTOR)).token
    yield Dashboard(running, tokens)
    await running.stop(grace_s=1)


async def test_signing_in_sets_a_strict_http_only_cookie_and_every_page_answers(dashboard: Dashboard) -> None:
    session = Session(dashboard.port)
    assert (await session.get("/")).header("location") == "/signin?next=%2F"
    form = await session.get("/signin")
    (nonce_cookie,) = form.cookies()
    assert "HttpOnly" in nonce_cookie and "SameSite=strict" in nonce_cookie and "Path=/signin" in nonce_cookie

    signed = await session.sign_in(dashboard.tokens["read"], "/queues")

    assert signed.status == 303 and signed.header("location") == "/queues"
    session_cookie = next(c for c in signed.cookies() if c.startswith("runwick_session="))
    assert "HttpOnly" in session_cookie and "SameSite=strict" in session_cookie and "Path=/" in session_cookie
    assert "Secure" not in session_cookie  # plain HTTP here; under TLS it is (below)
    job_id = await dashboard.enqueue()
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/failed", "/queues", "/schedules", "/workers"):
        page = await session.get(path)
        assert page.status == 200, (path, page.body[:300])
        assert page.header("content-security-policy") == CONTENT_SECURITY_POLICY
        assert page.header("cache-control") == "no-store"
        assert page.header("x-frame-options") == "DENY"
        assert "<script>" not in page.body and " style=" not in page.body  # nothing inline
    static = await session.get("/static/dashboard.js")
    assert static.status == 200 and static.header("content-security-policy") == CONTENT_SECURITY_POLICY


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        ("rwk_0123456789abcdef_wrong", 401, "Unknown or revoked token."),
        ("not a token at all", 401, "Unknown or revoked token."),
        ("", 400, "Enter a token."),
        ("enqueue", 403, "lacks the &#39;read&#39; scope"),
    ],
)
async def test_a_sign_in_that_fails_says_why_and_sets_no_session(
    dashboard: Dashboard, token: str, status: int, message: str
) -> None:
    session = Session(dashboard.port)
    refused = await session.sign_in(dashboard.tokens.get(token, token))
    assert refused.status == status
    assert message in refused.body
    assert "runwick_session" not in session.cookies
    assert (await session.get("/")).status == 303


async def test_a_sign_in_without_the_forms_csrf_value_or_to_another_site_is_refused(
    dashboard: Dashboard,
) -> None:
    session = Session(dashboard.port)
    await session.get("/signin")
    forged = await session.post("/signin", {"csrf": "guess", "token": dashboard.tokens["read"]})
    assert forged.status == 403 and "runwick_session" not in session.cookies
    no_cookie = Session(dashboard.port)
    assert (await no_cookie.post("/signin", {"csrf": "x", "token": dashboard.tokens["read"]})).status == 403

    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        signed = await Session(dashboard.port).sign_in(dashboard.tokens["read"], elsewhere)
        assert signed.header("location") == "/"


async def test_every_action_needs_the_csrf_token_of_the_session(dashboard: Dashboard) -> None:
    session = await dashboard.session("manage")
    job_id = await dashboard.enqueue()
    for form in ({}, {"csrf": "x" * 43}, {"csrf": (await (await dashboard.session("manage")).csrf())}):
        refused = await session.post(f"/jobs/{job_id}/cancel", form)
        assert refused.status == 403 and "CSRF" in refused.body
    refused = await session.post("/queues/default/pause", {})
    assert refused.status == 403
    assert (await dashboard.running.app.get_job(job_id)).state is JobState.AVAILABLE
    assert not (await dashboard.running.app.list_queues())[0][0].queue.paused
    assert "job.cancel" not in await dashboard.audit_actions()

    done = await session.post(f"/jobs/{job_id}/cancel", {"csrf": await session.csrf()})
    assert done.status == 303 and done.header("location") == f"/jobs/{job_id}?notice=cancelled"
    assert (await dashboard.running.app.get_job(job_id)).state is JobState.CANCELLED


async def test_each_route_needs_the_api_scope(dashboard: Dashboard) -> None:
    job_id = await dashboard.enqueue()
    reader = await dashboard.session("read")
    csrf = await reader.csrf()
    for path in (f"/jobs/{job_id}/cancel", "/queues/default/pause", "/failed/retry", "/attempts/x/reveal"):
        refused = await reader.post(path, {"csrf": csrf, "id": job_id})
        assert refused.status == 403, path
        assert "lacks the" in refused.body
    assert (await reader.get("/audit")).status == 403
    assert (await dashboard.running.app.get_job(job_id)).state is JobState.AVAILABLE

    admin = await dashboard.session("admin")
    audit = await admin.get("/audit")
    assert audit.status == 200 and "token.create" in audit.body
    assert (
        await (await dashboard.session("manage")).post(f"/attempts/{job_id}/reveal", {"csrf": csrf})
    ).status == 403


async def test_a_revoked_tokens_sessions_end(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    created = await app.create_token("short-lived", ["read"], [], SYSTEM_ACTOR)
    session = Session(dashboard.port)
    assert (await session.sign_in(created.token)).status == 303
    assert (await session.get("/jobs")).status == 200

    await app.revoke_token(created.record.id, SYSTEM_ACTOR)

    assert (await session.get("/jobs")).header("location") == "/signin?next=%2Fjobs"
    assert (await session.get("/jobs?fragment=1")).status == 401  # the live script then reloads


async def test_a_tampered_session_cookie_is_refused(dashboard: Dashboard) -> None:
    session = await dashboard.session("read")
    session_id = session.cookies["runwick_session"]
    flipped = ("B" if session_id[0] == "A" else "A") + session_id[1:]
    for value in (
        flipped,  # another ID of the right shape
        dashboard.tokens["manage"],  # a token is not a session
        dashboard.tokens["read"],  # not even the token this session signed in with
        "garbage",
    ):
        session.cookies["runwick_session"] = value
        assert (await session.get("/")).status == 303


async def test_live_fragments_carry_an_etag_and_answer_304_until_something_changes(
    dashboard: Dashboard,
) -> None:
    session = await dashboard.session("read")
    first = await session.get("/queues?fragment=1")
    etag = first.header("etag")
    assert first.status == 200 and etag and "<html" not in first.body
    assert (await session.get("/queues?fragment=1", **{"If-None-Match": etag})).status == 304

    await dashboard.enqueue()

    changed = await session.get("/queues?fragment=1", **{"If-None-Match": etag})
    assert changed.status == 200 and changed.header("etag") != etag
    assert 'data-queue="default"' in changed.body


async def test_list_views_show_no_payload_and_no_page_shows_error_text_unrevealed(
    dashboard: Dashboard,
) -> None:
    app = dashboard.running.app
    job_id = await dashboard.enqueue()
    session = await dashboard.session("reveal")
    for path in ("/jobs", "/jobs?fragment=1", "/", "/queues"):
        page = await session.get(path)
        assert page.status == 200 and "PAYLOAD-MARKER" not in page.body, path
    assert "PAYLOAD-MARKER" in (await session.get(f"/jobs/{job_id}")).body  # the job's own page previews it

    attempt_id = await asyncio.to_thread(_fail_one, dashboard.running, "ERROR-TEXT-MARKER")
    for path in (f"/jobs/{job_id}", "/failed", f"/jobs/{job_id}?fragment=1"):
        page = await session.get(path)
        assert page.status == 200 and "ERROR-TEXT-MARKER" not in page.body, path
    assert "boom" in (await session.get("/failed")).body

    revealed = await session.post(f"/attempts/{attempt_id}/reveal", {"csrf": await session.csrf()})
    assert revealed.status == 200 and revealed.header("cache-control") == "no-store"
    assert revealed.body.count("ERROR-TEXT-MARKER") == 2  # the message and the full text
    events, _ = await app.list_audit_events(
        action="attempt.reveal_error", target=attempt_id, page_size=10, page_token=""
    )
    assert [(e.actor_name, e.peer.endswith("(dashboard)")) for e in events] == [("dash-reveal", True)]


async def test_bad_input_gets_a_page_saying_what_is_wrong_and_changes_nothing(dashboard: Dashboard) -> None:
    await dashboard.enqueue()
    session = await dashboard.session("manage")
    csrf = await session.csrf()
    cases = [
        ("GET", "/jobs/not-a-uuid", 400, "not a UUID"),
        ("GET", "/jobs/0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f", 404, "does not exist"),
        ("GET", "/jobs?state=bogus", 400, "unknown state"),
        ("GET", "/jobs?page=not-a-token", 400, "not a page token"),
        ("GET", "/jobs/go?id=", 400, "enter a job ID"),
        ("GET", "/no/such/page", 404, "no page at"),
        ("POST", "/queues/nosuch/pause", 404, "does not exist"),
        ("POST", "/queues/default/limit?", 400, "not a whole number"),
        ("POST", "/failed/retry", 400, "select at least one job"),
    ]
    for method, path, status, message in cases:
        if method == "GET":
            page = await session.get(path)
        else:
            form = {"csrf": csrf, "limit": "many"} if path.endswith("limit?") else {"csrf": csrf}
            page = await session.post(path.rstrip("?"), form)
        assert page.status == status, (path, page.body[:400])
        assert message in page.body, (path, page.body[:400])
    retry_running = await session.post(f"/jobs/{await dashboard.enqueue()}/retry", {"csrf": csrf})
    assert retry_running.status == 409
    stats = (await dashboard.running.app.list_queues())[0][0]
    assert not stats.queue.paused and stats.queue.concurrency_limit is None
    assert [a for a in await dashboard.audit_actions() if not a.startswith("token.")] == []


async def test_bulk_retry_retries_the_selected_failed_jobs(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    ids = [await dashboard.enqueue() for _ in range(3)]
    for job_id in ids:
        await app.cancel(job_id, SYSTEM_ACTOR)  # ended, so retryable
    session = await dashboard.session("manage")
    done = await session.post("/failed/retry", {"csrf": await session.csrf(), "id": [*ids[:2], "not-an-id"]})
    assert done.status == 303
    assert done.header("location") == "/failed?notice=retried_many&count=2&refused=1"
    assert [(await app.get_job(i)).state for i in ids] == [
        JobState.AVAILABLE,
        JobState.AVAILABLE,
        JobState.CANCELLED,
    ]
    assert "Retried 2 jobs. 1 could not be retried" in (await session.get(done.header("location") or "")).body


async def test_with_authentication_off_pages_open_and_actions_still_need_csrf(database_url: str) -> None:
    running = await start_coordinator(CoordinatorConfig(database_url=database_url, port=0, dashboard_port=0))
    try:
        assert running.dashboard_port is not None
        session = Session(running.dashboard_port)
        assert (await session.get("/signin")).header("location") == "/"
        page = await session.get("/")
        assert page.status == 200 and "authentication is off" in page.body
        job_id = (await running.app.enqueue([NewJobSpec("tests.echo", b"{}")]))[0].job_id
        assert (await session.post(f"/jobs/{job_id}/cancel", {})).status == 403
        done = await session.post(f"/jobs/{job_id}/cancel", {"csrf": await session.csrf(f"/jobs/{job_id}")})
        assert done.status == 303
        events, _ = await running.app.list_audit_events(
            action="job.cancel", target=None, page_size=5, page_token=""
        )
        assert [e.actor_name for e in events] == ["anonymous"]
    finally:
        await running.stop(grace_s=1)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_under_tls_the_dashboard_speaks_https_with_secure_cookies(database_url: str, pki: Pki) -> None:  # noqa: F811
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        dashboard_port=0,
        auth_enabled=True,
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
    )
    running = await start_coordinator(config)
    try:
        assert running.dashboard_port is not None and running.bootstrap_token is not None
        plain = Session(running.dashboard_port)
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            await plain.get("/signin")
        session = Session(running.dashboard_port, tls=ssl.create_default_context(cafile=str(pki.ca)))
        signed = await session.sign_in(running.bootstrap_token)
        assert signed.status == 303
        (session_cookie,) = [c for c in signed.cookies() if c.startswith("__Host-runwick_session=")]
        assert "Secure" in session_cookie and "Path=/" in session_cookie and "Domain" not in session_cookie
        page = await session.get("/")
        assert page.status == 200 and page.header("strict-transport-security")
    finally:
        await running.stop(grace_s=1)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_no_dashboard_is_served_when_its_port_is_none(database_url: str) -> None:
    running = await start_coordinator(CoordinatorConfig(database_url=database_url, port=0))
    try:
        assert running.dashboard_port is None and running.dashboard is None
    finally:
        await running.stop(grace_s=1)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_an_action_returns_to_its_page_with_one_notice(dashboard: Dashboard) -> None:
    await dashboard.enqueue()
    session = await dashboard.session("manage")
    csrf = await session.csrf()
    paused = await session.post(
        "/queues/default/pause", {"csrf": csrf, "next": "/queues?x=1&notice=resumed&count=3"}
    )
    assert paused.header("location") == "/queues?x=1&notice=paused"
    resumed = await session.post("/queues/default/resume", {"csrf": csrf, "next": "https://evil.example/"})
    assert resumed.header("location") == "/?notice=resumed"


async def test_no_page_reads_the_jobs_table_unbounded(dashboard: Dashboard) -> None:
    """Counts come from the maintained counts: every read of ``jobs`` a page makes is a
    keyset page (LIMIT), one job by ID, or the leased jobs (their partial index)."""
    from sqlalchemy import event

    job_id = await dashboard.enqueue()
    session = await dashboard.session("admin")
    statements: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(" ".join(statement.split()))

    engine = dashboard.running.store._read_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        for path in (
            "/",
            "/jobs",
            "/jobs?state=failed&queue=default",
            "/jobs?wire_name=tests.echo",
            f"/jobs/{job_id}",
            "/failed",
            "/queues",
            "/schedules",
            "/workers",
            "/audit",
        ):
            assert (await session.get(path)).status == 200
            assert (await session.get(path + ("&" if "?" in path else "?") + "fragment=1")).status == 200
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    on_jobs = [s for s in statements if re.search(r"\bFROM jobs\b", s)]
    assert on_jobs
    for statement in on_jobs:
        bounded = (
            "LIMIT" in statement
            or "jobs.id = " in statement
            or "state IN ('reserved', 'running')" in statement
        )
        assert bounded, statement


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_sign_in_while_the_database_is_unavailable_says_so_and_sets_no_session(
    dashboard: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unavailable(*args: object) -> str:
        raise Unavailable("the database is unavailable; try again")

    monkeypatch.setattr(dashboard.running.app, "open_dashboard_session", unavailable)
    session = Session(dashboard.port)

    refused = await session.sign_in(dashboard.tokens["read"])

    assert refused.status == 503 and "unavailable" in refused.body
    assert "runwick_session" not in session.cookies
