"""The dashboard's ASGI application: sign-in (rate-limited per client address) and
sign-out, who is asking (the session the cookie names, looked up in the database through
the facade), the scope each route needs (the API's: views ``read``, actions ``manage``,
reveals ``reveal``, the audit log ``admin``), CSRF on every POST, and errors turned into
pages. ``guard`` checks every request's head and bounds its body first.

A route is ``(path, view, scope, methods)``; views (``views``) get the request and the
``Visitor`` and call the facade only.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from coordinator.app import Coordinator
from coordinator.dashboard import sessions
from coordinator.dashboard.guard import RequestGuard, allowed_hosts, refusal
from coordinator.dashboard.limits import LogSampler, SigninLimiter, client_key
from coordinator.dashboard.render import STATIC, Renderer, SecurityHeaders
from coordinator.dashboard.requests import View, Visitor, is_fragment, live_url, local_path, peer
from coordinator.dashboard.routes import ROUTES
from coordinator.domain.access import ANONYMOUS, Principal, Scope
from coordinator.errors import (
    AlreadyExists,
    CoordinatorError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)

log = logging.getLogger(__name__)

SIGNIN_COOKIE_MAX_AGE_S = 3_600
SIGNED_OUT = "Sign in first: your session ended or never began."
SIGNIN_EXPIRED = "The sign-in form expired (CSRF check failed); try again."
CSRF_FAILED = (
    "This form has expired or did not come from this dashboard (CSRF check failed). "
    "Reload the page and try again."
)
MAX_FORM_FIELDS = 1_000
TOO_MANY_SIGNINS = "Too many sign-in attempts from this address; wait a little and try again."
_STATUS = {
    InvalidArgument: 400,
    NotFound: 404,
    AlreadyExists: 409,
    FailedPrecondition: 409,
    PermissionDenied: 403,
    Unavailable: 503,
}


class Refused(Exception):
    """A request the dashboard answers with an error page (status and message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Dashboard:
    """The facade, the templates, and how requests are checked."""

    def __init__(self, app: Coordinator, *, tls: bool) -> None:
        self.app = app
        self.tls = tls
        self.renderer = Renderer()
        self.process_key = secrets.token_bytes(32)
        self.cookies = sessions.CookieNames.for_tls(tls)
        limits = app.config.dashboard_limits
        self.signin_limiter = SigninLimiter(
            burst=limits.signin_burst,
            refill_per_s=limits.signin_refill_per_s,
            max_clients=limits.signin_clients_tracked,
            now=time.monotonic,
        )
        self.refused_signins = LogSampler(
            interval_s=limits.signin_log_interval_s,
            max_clients=limits.signin_clients_tracked,
            now=time.monotonic,
        )
        self.limited_signins = LogSampler(
            interval_s=limits.signin_log_interval_s,
            max_clients=limits.signin_clients_tracked,
            now=time.monotonic,
        )

    @property
    def auth_enabled(self) -> bool:
        return self.app.config.auth_enabled

    # -- who is asking -------------------------------------------------------------------

    async def visitor(self, request: Request) -> Visitor | None:
        """The signed-in operator, or None (no session, or it ended: signed out, expired,
        or its token revoked; the database is asked on every request)."""
        where = peer(request)
        if not self.auth_enabled:
            return Visitor(ANONYMOUS, sessions.anonymous_csrf_token(self.process_key), where)
        session_id = request.cookies.get(self.cookies.session)
        if not session_id:
            return None
        principal = await self.app.dashboard_principal(session_id)
        if principal is None:
            return None
        return Visitor(principal, sessions.csrf_token(session_id), where)

    def admit(self, request: Request) -> Response | None:
        """What a POST must show before its body is read (``guard``): a sign-in, an
        attempt left in its address's budget and the form's nonce cookie; an action, a
        session cookie."""
        if not self.auth_enabled:
            return None
        path = request.url.path
        if path == "/signin":
            client = client_key(request.client.host if request.client else None)
            if not self.signin_limiter.allow(client):
                count = self.limited_signins.note(client)
                if count:
                    log.info("dashboard: %d sign-in attempts from %s over the limit (429)", count, client)
                wait_s = self.signin_limiter.retry_after_s(client)
                return refusal(429, TOO_MANY_SIGNINS, close=True, **{"retry-after": str(wait_s)})
            if not request.cookies.get(self.cookies.signin):
                return self._signin_page(request, SIGNIN_EXPIRED, 403, None, close=True)
            return None
        if not request.cookies.get(self.cookies.session):
            if path == "/signout":
                refused = self._signed_out(RedirectResponse("/signin", status_code=303))
            else:
                refused = self.error(request, None, 401, SIGNED_OUT)
            refused.headers["connection"] = "close"  # its body is left unread
            return refused
        return None

    async def _principal(self, token: str) -> Principal | None:
        known, principal = self.app.cached_principal(token)
        if not known:
            principal = await self.app.authenticate(token)
        return principal

    # -- the pages every view shares -----------------------------------------------------

    def context(self, request: Request, visitor: Visitor | None, **values: Any) -> dict[str, Any]:
        return {
            "request": request,
            "visitor": visitor,
            "auth_enabled": self.auth_enabled,
            "path": request.url.path,
            "now_ms": self.app.clock.now_ms(),
            "live_url": live_url(request),
            "Scope": Scope,
            **values,
        }

    def page(
        self, request: Request, visitor: Visitor | None, name: str, status_code: int = 200, **values: Any
    ) -> Response:
        return self.renderer.page(name, self.context(request, visitor, **values), status_code)

    def error(self, request: Request, visitor: Visitor | None, status: int, message: str) -> Response:
        if is_fragment(request):
            return Response(message, status_code=status, media_type="text/plain")
        return self.page(request, visitor, "error.html", status, status=status, message=message)

    # -- routes --------------------------------------------------------------------------

    def endpoint(self, view: View, needs: Scope, *, action: bool) -> Callable[[Request], Awaitable[Response]]:
        """``view`` behind sign-in, the CSRF check (for actions) and the scope check."""

        async def run(request: Request) -> Response:
            visitor: Visitor | None = None
            try:
                visitor = await self.visitor(request)
                if visitor is None:
                    if action or is_fragment(request):
                        return self.error(request, None, 401, SIGNED_OUT)
                    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)
                if action:
                    form = await request.form(max_fields=MAX_FORM_FIELDS)
                    given = form.get(sessions.CSRF_FIELD)
                    if not sessions.same(given if isinstance(given, str) else None, visitor.csrf):
                        log.info(
                            "dashboard: refused %s %s without a valid CSRF token",
                            request.method,
                            request.url.path,
                        )
                        raise Refused(403, CSRF_FAILED)
                if not visitor.allows(needs):
                    raise Refused(
                        403,
                        f"Token {visitor.principal.name!r} ({visitor.principal.token_id}) lacks the "
                        f"{needs.value!r} scope this needs.",
                    )
                return await view(self, request, visitor)
            except Refused as refused:
                return self.error(request, visitor, refused.status, str(refused))
            except CoordinatorError as exc:
                return self.error(request, visitor, _status(exc), str(exc))

        return run

    # -- sign-in and sign-out --------------------------------------------------------------

    async def signin_form(self, request: Request) -> Response:
        if not self.auth_enabled:
            return RedirectResponse("/", status_code=303)
        return self._signin_page(request, "", 200, request.query_params.get("next"))

    def _signin_page(
        self, request: Request, message: str, status: int, next_path: object, *, close: bool = False
    ) -> Response:
        nonce = sessions.new_signin_nonce()
        response = self.page(
            request,
            None,
            "signin.html",
            status,
            csrf=nonce,
            message=message,
            next=local_path(next_path if isinstance(next_path, str) else None),
        )
        response.set_cookie(
            self.cookies.signin,
            nonce,
            max_age=SIGNIN_COOKIE_MAX_AGE_S,
            path=self.cookies.signin_path,
            secure=self.cookies.secure,
            httponly=True,
            samesite="strict",
        )
        if close:  # answered before the body was read: the connection cannot go on
            response.headers["connection"] = "close"
        return response

    async def signin(self, request: Request) -> Response:
        if not self.auth_enabled:
            return RedirectResponse("/", status_code=303)
        try:
            return await self._signin(request)
        except CoordinatorError as exc:  # the database unavailable: say so, not a 500
            return self.error(request, None, _status(exc), str(exc))

    async def _signin(self, request: Request) -> Response:
        form = await request.form(max_fields=10)
        given, token, next_path = form.get(sessions.CSRF_FIELD), form.get("token"), form.get("next")
        nonce = request.cookies.get(self.cookies.signin)
        if not nonce or not isinstance(given, str) or not sessions.same(given, nonce):
            return self._signin_page(request, SIGNIN_EXPIRED, 403, next_path)
        token = token.strip() if isinstance(token, str) else ""
        if not token:
            return self._signin_page(request, "Enter a token.", 400, next_path)
        principal = await self._principal(token)
        if principal is None:
            client = client_key(request.client.host if request.client else None)
            count = self.refused_signins.note(client)
            if count:  # one line per address and interval, however fast it guesses
                log.info(
                    "dashboard: %d sign-in(s) refused from %s: unknown or revoked token", count, peer(request)
                )
            return self._signin_page(request, "Unknown or revoked token.", 401, next_path)
        if not principal.allows(Scope.READ):
            return self._signin_page(
                request,
                f"Token {principal.name!r} lacks the 'read' scope the dashboard needs.",
                403,
                next_path,
            )
        session_id = await self.app.open_dashboard_session(principal)
        response = RedirectResponse(
            local_path(next_path if isinstance(next_path, str) else None), status_code=303
        )
        response.set_cookie(
            self.cookies.session,
            session_id,
            path="/",
            secure=self.cookies.secure,
            httponly=True,
            samesite="strict",
        )
        response.delete_cookie(
            self.cookies.signin, path=self.cookies.signin_path, secure=self.cookies.secure, httponly=True
        )
        log.info("dashboard: %s (%s) signed in from %s", principal.name, principal.token_id, peer(request))
        return response

    async def signout(self, request: Request) -> Response:
        visitor = await self.visitor(request)
        form = await request.form(max_fields=10)
        given = form.get(sessions.CSRF_FIELD)
        if visitor is not None and not sessions.same(given if isinstance(given, str) else None, visitor.csrf):
            return self.error(request, visitor, 403, "CSRF check failed; reload the page and sign out again.")
        session_id = request.cookies.get(self.cookies.session)
        if visitor is not None and session_id:
            await self.app.close_dashboard_session(session_id)  # ended on every replica
        return self._signed_out(RedirectResponse("/signin", status_code=303))

    def _signed_out(self, response: Response) -> Response:
        response.delete_cookie(
            self.cookies.session, path="/", secure=self.cookies.secure, httponly=True, samesite="strict"
        )
        return response

    async def not_found(self, request: Request, exc: Exception) -> Response:
        visitor = await self.visitor(request)
        return self.error(request, visitor, 404, f"There is no page at {request.url.path}.")


def build_app(app: Coordinator, *, tls: bool) -> Starlette:
    """The dashboard over ``app``: every route of ``routes.ROUTES``, sign-in, sign-out and
    the static files, with the security headers on every response."""
    dashboard = Dashboard(app, tls=tls)
    routes: list[Route | Mount] = [
        Route("/signin", dashboard.signin_form, methods=["GET"]),
        Route("/signin", dashboard.signin, methods=["POST"]),
        Route("/signout", dashboard.signout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    for path, view, needs, methods in ROUTES:
        action = methods != ("GET",)
        routes.append(Route(path, dashboard.endpoint(view, needs, action=action), methods=list(methods)))
    config = app.config
    hosts = allowed_hosts(config.host, config.dashboard_allowed_hosts)
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders, tls=tls),
            Middleware(
                RequestGuard, hosts=hosts, tls=tls, limits=config.dashboard_limits, admit=dashboard.admit
            ),
        ],
        exception_handlers={404: dashboard.not_found},
    )


def _status(exc: CoordinatorError) -> int:
    for kind, status in _STATUS.items():
        if isinstance(exc, kind):
            return status
    return 500
