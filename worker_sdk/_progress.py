"""Progress reports: checked where the handler makes them, sent on the heartbeats.

A handler may report as often as it likes: the worker keeps only each run's latest
report and sends it with the next heartbeat, once, if it changed. So reporting costs
the coordinator at most one small write per run per heartbeat interval.
"""

from __future__ import annotations

from worker_sdk.progress_rules import ProgressReport, report_problem
from worker_sdk.proto.runwick.v1 import job_pb2

__all__ = ["ProgressReport", "checked_report", "progress_from_proto"]


def progress_from_proto(message: job_pb2.Progress) -> ProgressReport:
    """A report from its wire form."""
    total = message.total if message.HasField("total") else None
    return ProgressReport(message.done, total, message.message)


def checked_report(done: object, total: object, message: object) -> ProgressReport:
    """The report, or ValueError saying what is wrong with it (raised in the handler,
    so a bad report never reaches the coordinator). The rule is
    ``worker_sdk.progress_rules.report_problem``, the coordinator's too."""
    for name, value in (("done", done), ("total", total)):
        # bool is an int subclass, but True/False as an amount of work is a mistake.
        if (value is not None or name == "done") and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            raise ValueError(f"progress {name} must be an int or a float, not {type(value).__name__}")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise ValueError(f"progress message must be a str or None, not {type(message).__name__}")
    problem = report_problem(done, total, message)  # type: ignore[arg-type]  # numbers, checked above
    if problem is not None:
        raise ValueError(f"progress {problem}")
    return ProgressReport(float(done), None if total is None else float(total), message)  # type: ignore[arg-type]
