"""Middleware: a small callable chain around every handler call (R-6).

Middleware is any object with ``async def __call__(self, ctx, call_next) -> JobResult``.
The first middleware given is the outermost. ``call_next()`` runs the rest of the chain
(and finally the handler) and returns its ``JobResult``; exceptions raised by the handler
come out of ``call_next()`` so middleware can turn them into explicit results::

    class RateLimitRetry:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            try:
                return await call_next()
            except RateLimited:
                return Retry("rate_limited", timedelta(minutes=2))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from worker_sdk._context import JobContext
from worker_sdk._results import Failed, JobResult, Retry, Success

CallNext = Callable[[], Awaitable[JobResult]]
"""Runs the rest of the middleware chain and the handler."""


class Middleware(Protocol):
    """Wraps every handler call; see the module documentation."""

    async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
        """Runs around the rest of the chain and returns the run's result."""
        ...


def build_chain(middleware: Sequence[Middleware], ctx: JobContext, innermost: CallNext) -> CallNext:
    """Returns a ``call_next`` that runs ``middleware`` (first outermost) then ``innermost``."""
    call: CallNext = innermost
    for layer in reversed(middleware):
        call = _bind(layer, ctx, call)
    return call


def _bind(layer: Middleware, ctx: JobContext, call_next: CallNext) -> CallNext:
    async def call() -> JobResult:
        result = await layer(ctx, call_next)
        if not isinstance(result, Success | Retry | Failed):
            raise TypeError(
                f"middleware {type(layer).__qualname__} returned {type(result).__name__}; "
                "return Success, Retry or Failed (or raise)"
            )
        return result

    return call
