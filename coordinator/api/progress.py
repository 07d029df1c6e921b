"""The progress reports of a Heartbeat, checked and put in their stored form.

Checked before any other work for them: at most one report per attempt the heartbeat
names (so no more reports than attempt IDs), each well formed (``domain.progress``).
Reports of attempts the heartbeat does not name are dropped here.
"""

from __future__ import annotations

from coordinator.domain.progress import Progress, encode_progress, progress_problem
from coordinator.errors import InvalidArgument
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb


def heartbeat_progress(heartbeat: pb.Heartbeat) -> dict[str, str]:
    """The heartbeat's reports by attempt ID, stored form; raises InvalidArgument for a
    malformed one (the stream ends, as for any malformed heartbeat)."""
    reports = heartbeat.progress
    if not reports:
        return {}
    if len(reports) > len(heartbeat.attempt_ids):
        too_many = f"{len(reports)} reports for {len(heartbeat.attempt_ids)} attempts"
        raise InvalidArgument("heartbeat.progress", too_many, reason="OUT_OF_RANGE")
    named = set(heartbeat.attempt_ids)
    stored: dict[str, str] = {}
    for at, report in enumerate(reports):
        field = f"heartbeat.progress[{at}]"
        if report.attempt_id in stored:
            raise InvalidArgument(field, f"a second report for attempt {report.attempt_id!r}")
        sent = report.progress
        total = sent.total if sent.HasField("total") else None
        problem = progress_problem(sent.done, total, sent.message)
        if problem is not None:
            raise InvalidArgument(field, problem, reason="OUT_OF_RANGE")
        if report.attempt_id in named:
            stored[report.attempt_id] = encode_progress(Progress(sent.done, total, sent.message))
    return stored
