"""Progress of a run, as its handler reports it over the worker's heartbeats.

A report is two numbers and a short text: ``done`` and, when the handler knows it,
``total`` (finite and not negative, in the handler's own unit), and what the run is
doing. The coordinator keeps the latest report of each attempt, stored as one small
JSON text so that a report costs one column and one write.
"""

from __future__ import annotations

import json

from worker_sdk.progress_rules import ProgressReport, report_problem

Progress = ProgressReport
"""How far a run has come: the SDK's report, one type on both sides of the wire."""


def progress_problem(done: float, total: float | None, message: str) -> str | None:
    """Why a report is malformed, or None when it is well formed
    (``worker_sdk.progress_rules.report_problem``, the rule the SDK checks too)."""
    return report_problem(done, total, message)


def encode_progress(progress: Progress) -> str:
    """The stored form of a report (``attempts.progress``)."""
    return json.dumps([progress.done, progress.total, progress.message], ensure_ascii=False)


def decode_progress(text: str | None) -> Progress | None:
    """The report stored as ``text`` (None for no report)."""
    if text is None:
        return None
    done, total, message = json.loads(text)
    return Progress(float(done), None if total is None else float(total), str(message))
