"""Waiting for a condition to hold: poll it, or fail saying what was awaited.

These are for conditions that come true by themselves (a job reaches a state, a log line
appears, a file is written). They never prove that something does *not* happen: for
that, wait for an event known to come after it (a reply to a later message, a heartbeat
round, an ack), then assert the absence.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

TIMEOUT_S = 20.0
INTERVAL_S = 0.05


async def eventually(
    predicate: Callable[[], T],
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    *,
    what: str | None = None,
) -> T:
    """Waits until ``predicate()`` is truthy and returns that value.

    Raises:
        AssertionError: Not within ``timeout`` seconds; names ``what`` (default: the
            predicate's source) and the last value.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := predicate()):
        if loop.time() > deadline:
            raise AssertionError(_not_met(predicate, timeout, what, value))
        await asyncio.sleep(interval)
    return value


async def eventually_async(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    *,
    what: str | None = None,
) -> T:
    """Like ``eventually`` for a coroutine predicate (for example a read over gRPC)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := await predicate()):
        if loop.time() > deadline:
            raise AssertionError(_not_met(predicate, timeout, what, value))
        await asyncio.sleep(interval)
    return value


def wait_until(
    predicate: Callable[[], T],
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    *,
    what: str | None = None,
) -> T:
    """Like ``eventually`` for code without an event loop (it blocks the thread)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(_not_met(predicate, timeout, what, value))
        time.sleep(interval)
    return value


def _not_met(predicate: Callable[..., Any], timeout: float, what: str | None, value: object) -> str:
    last = "" if value is None or isinstance(value, bool) else f" (last value: {value!r:.200})"
    return f"gave up after {timeout:g} s waiting for {what or describe(predicate)}{last}"


def describe(predicate: Callable[..., Any]) -> str:
    """What a predicate waits for: a lambda's source and place, else its name."""
    bound_to = getattr(predicate, "__self__", None)
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    if bound_to is not None and not inspect.ismodule(bound_to):
        return f"{bound_to!r}.{getattr(predicate, '__name__', name)}()"
    code = getattr(predicate, "__code__", None)
    if code is None or getattr(predicate, "__name__", "") != "<lambda>":
        return name
    return f"{_lambda_source(predicate) or name} ({code.co_filename}:{code.co_firstlineno})"


def _lambda_source(predicate: Callable[..., Any]) -> str | None:
    try:
        lines = textwrap.dedent(inspect.getsource(predicate))
    except (OSError, TypeError):
        return None
    try:
        lambdas = [node for node in ast.walk(ast.parse(lines)) if isinstance(node, ast.Lambda)]
        segment = ast.get_source_segment(lines, lambdas[0]) if len(lambdas) == 1 else None
    except SyntaxError:  # the lines are part of a longer expression
        segment = None
    text = " ".join((segment or lines).split())
    return text[text.find("lambda") :] if "lambda" in text else text
