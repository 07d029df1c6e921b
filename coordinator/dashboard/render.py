"""Pages and fragments: the Jinja2 environment (autoescaped), the filters templates use
(times, ages, durations, payload previews), responses with their caching rules, and the
security headers every response carries.

Caching: pages are ``no-store`` (they show job data to a signed-in operator); live
fragments carry an ETag and are answered 304 when nothing changed; static files may be
cached for an hour.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.domain.rates import format_period
from coordinator.domain.records import QueueRecord, QueueStats
from worker_sdk.trace_rules import trace_id_of

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""No inline script or style, nothing from elsewhere, never framed."""
PREVIEW_BYTES = 4_096
"""How much of a payload or output the job page shows."""


def format_time(ms: int | None) -> str:
    if ms is None:
        return "–"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def iso_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_duration(ms: int | None) -> str:
    """``850 ms``, ``12.3 s``, ``4m 05s``, ``2h 10m``, ``3d 4h``."""
    if ms is None:
        return "–"
    ms = max(ms, 0)
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3_600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86_400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86_400}d {seconds % 86_400 // 3600}h"


def between(start_ms: int | None, end_ms: int | None) -> str:
    if start_ms is None or end_ms is None:
        return "–"
    return format_duration(end_ms - start_ms)


def preview(data: bytes | None) -> dict[str, Any]:
    """The start of a blob for the job page: text when it is UTF-8, else hex."""
    if data is None:
        return {"kind": "none", "text": "", "size": 0, "cut": False}
    head = data[:PREVIEW_BYTES]
    try:
        text = head.decode("utf-8")
        kind = "text"
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 3 and len(data) > PREVIEW_BYTES:  # cut inside a character
            text, kind = head[: exc.start].decode("utf-8"), "text"
        else:
            text, kind = head[:512].hex(" "), "hex"
    return {"kind": kind, "text": text, "size": len(data), "cut": len(data) > len(head)}


def short_id(value: str | None) -> str:
    """The last 12 characters of a UUID (its random part), enough to tell jobs apart."""
    if not value:
        return "–"
    return "…" + value[-12:] if len(value) > 12 else value


def class_name(recorded: str | None) -> str:
    """The class name of a recorded exception type, without its module path.

    Workers record ``module.QualName`` of the class they raised, and that module is
    often a private one (``worker_sdk._errors.PermanentJobFailure``) the class is not
    imported from. The class name alone is always true and short; the page keeps the
    recorded path in a title attribute.
    """
    if not recorded:
        return ""
    return recorded.rsplit(".", 1)[-1]


SPARK_HEIGHT = 20


def sparkline(series: Sequence[int | None]) -> dict[str, Any]:
    """A depth series as SVG polylines (one per run of minutes with a read; x is the
    minute, y the depth scaled to the series' own peak) with its newest and peak values."""
    known = [v for v in series if v is not None]
    peak = max(known, default=0)
    runs: list[list[tuple[float, float]]] = [[]]
    for x, value in enumerate(series):
        if value is None:
            runs.append([])
        else:
            runs[-1].append((x, SPARK_HEIGHT - 1 - (value * (SPARK_HEIGHT - 2) / peak if peak else 0)))
    lines = []
    for run in filter(None, runs):
        if len(run) == 1:  # a lone read: a short flat stroke, so that it shows
            run.append((run[0][0] + 0.8, run[0][1]))
        lines.append(" ".join(f"{x:g},{y:.1f}" for x, y in run))
    newest = next((v for v in reversed(series) if v is not None), None)
    return {
        "lines": lines,
        "width": max(len(series) - 1, 1),
        "peak": peak,
        "newest": newest,
        "reads": len(known),
    }


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def build_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # package files: no stat of every template on every render
    )
    env.filters.update(
        time=format_time,
        iso=iso_time,
        duration=format_duration,
        short=short_id,
        percent=percent,
        class_name=class_name,
        trace_id=trace_id_of,
    )
    env.globals.update(
        between=between, preview=preview, sparkline=sparkline, rate_text=rate_text, keys_text=keys_text
    )
    return env


class Renderer:
    def __init__(self) -> None:
        self.env = build_environment()

    def render(self, name: str, context: Mapping[str, Any]) -> str:
        return self.env.get_template(name).render(context)

    def page(self, name: str, context: Mapping[str, Any], status_code: int = 200) -> HTMLResponse:
        response = HTMLResponse(self.render(name, context), status_code=status_code)
        response.headers["Cache-Control"] = "no-store"
        return response

    def fragment(self, request: Request, name: str, context: Mapping[str, Any]) -> Response:
        """A live region's new content, or 304 when it is what the browser has."""
        body = self.render(name, context)
        etag = 'W/"' + hashlib.sha256(body.encode()).hexdigest()[:20] + '"'
        headers = {"ETag": etag, "Cache-Control": "no-cache, private"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return HTMLResponse(body, headers=headers)


class SecurityHeaders:
    """Adds the security headers to every response (pure ASGI: no body buffering)."""

    def __init__(self, app: ASGIApp, *, tls: bool) -> None:
        self.app = app
        self.headers = [
            (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"),
            (b"cross-origin-opener-policy", b"same-origin"),
        ]
        if tls:
            self.headers.append((b"strict-transport-security", b"max-age=31536000"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(self.headers)
                if static:
                    headers.append((b"cache-control", b"public, max-age=3600"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def rate_text(queue: QueueRecord) -> str:
    """A queue's rate as the CLI writes it (``100/1m``, ``10/1s per key``), or "none"."""
    if queue.rate_count is None or queue.rate_period_ms is None:
        return "none"
    per_key = " per key" if queue.rate_per_key else ""
    return f"{queue.rate_count}/{format_period(queue.rate_period_ms)}{per_key}"


def keys_text(stats: QueueStats) -> str:
    """A queue's keys under its per-key controls: ``4 active · 2 full: a, b · 1 at rate:
    c`` (the first few named, ``+N`` for the rest), or "none" without such a control."""
    if stats.active_keys is None:
        return "none"
    parts = [f"{stats.active_keys} active"]
    for what, first, count in (
        ("full", stats.first_keys_at_limit, stats.keys_at_limit),
        ("at rate", stats.first_keys_at_rate, stats.keys_at_rate),
    ):
        if count:
            names = ", ".join(key or "(no key)" for key in first)  # '' is the implicit key
            more = f" +{count - len(first)}" if count > len(first) else ""
            parts.append(f"{count} {what}: {names}{more}")
    return " · ".join(parts)
