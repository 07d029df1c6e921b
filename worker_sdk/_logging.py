"""Structured logs: a JSON line formatter, and the job context a run's log lines carry.

While a handler runs (its middleware and sync handler threads included), every log record
formatted by ``JsonFormatter`` names the job and attempt, whichever logger wrote it, and
the run's span (``trace_id``, ``span_id``) when the run is traced (``_tracing``). Log
calls elsewhere may pass the same fields with ``extra={"attempt_id": ...}``. Error text
stays out of INFO and above (R-22): handler exceptions are logged at DEBUG only.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime

CONTEXT_FIELDS = ("job_id", "attempt_id", "wire_name", "queue", "worker_id", "trace_id", "span_id")
"""Record attributes (from ``extra`` or the run's context) copied into each JSON line."""

_NO_FIELDS: Mapping[str, str] = {}
_Fields = tuple[Mapping[str, str], Mapping[str, str]]
_job_context: contextvars.ContextVar[_Fields | None] = contextvars.ContextVar(
    "runwick_job_log_context", default=None
)
"""The run's fields, and its span's: a mapping read only when a line is formatted."""


@contextlib.contextmanager
def job_log_context(span_fields: Mapping[str, str] = _NO_FIELDS, /, **fields: str) -> Iterator[None]:
    """Adds ``fields`` and ``span_fields`` to every log line formatted in this context (a
    run's task). ``span_fields`` is read only when a line is formatted: a traced run's
    span IDs are written out for the lines its run logs, not for every run."""
    outer = _job_context.get()
    if outer is not None:
        fields = {**outer[0], **fields}
        span_fields = span_fields or outer[1]
    token = _job_context.set((fields, span_fields))
    try:
        yield
    finally:
        _job_context.reset(token)


def current_log_context() -> Mapping[str, str]:
    """The job fields of the running context; empty outside a run."""
    context = _job_context.get()
    if context is None:
        return _NO_FIELDS
    fields, span_fields = context
    return {**fields, **span_fields} if span_fields else fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message`` and the job
    fields (``job_id``, ``attempt_id``, ...) when known; ``exception`` with a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(current_log_context())
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
LOG_FORMATS = ("text", "json")


def configure_logging(level: str, log_format: str = "text") -> None:
    """Sets up the root logger of a standalone process (``runwick serve``/``worker``, or
    a script that calls ``Worker.run()``); replaces any handlers already configured.

    Args:
        level: The lowest level logged, e.g. ``"INFO"`` or ``"debug"``.
        log_format: ``"text"`` for one readable line per record, or ``"json"`` for one
            JSON object per line: ``time``, ``level``, ``logger``, ``message`` and, on
            lines about a run, ``job_id``, ``attempt_id``, ``wire_name``, ``queue``,
            and ``trace_id`` and ``span_id`` of the run's span when it is traced.

    Raises:
        ValueError: ``log_format`` is neither ``text`` nor ``json``, or ``level`` is
            not a level name.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
