"""``JobContext.report_progress`` and how heartbeats carry it: bad values raise at the
call and are never kept; reports between two heartbeats go out as one, the last; an
unchanged report is not sent again, unless the stream that carried it is gone."""

from __future__ import annotations

import math
import threading
from datetime import timedelta

import pytest

from worker_sdk import JobContext, ProgressReport
from worker_sdk._heartbeat import Heartbeater
from worker_sdk._runs import Phase, Run, RunTable
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb


def _context(attempt_id: str = "a1") -> JobContext:
    return JobContext(
        job_id="j1",
        attempt_id=attempt_id,
        wire_name="images.resize",
        queue="default",
        execution_number=1,
        max_executions=3,
        generation=1,
    )


@pytest.mark.parametrize(
    ("done", "total", "message"),
    [
        (-1, None, None),
        (math.nan, None, None),
        (math.inf, None, None),
        (1, -0.5, None),
        (1, math.nan, None),
        ("3", None, None),
        (True, None, None),
        (1, "10", None),
        (1, 10, 7),
        (1, 10, "x" * 257),
    ],
)
def test_a_bad_report_raises_value_error_and_is_not_kept(
    done: object, total: object, message: object
) -> None:
    ctx = _context()
    ctx.report_progress(1, 2, "fine")
    with pytest.raises(ValueError, match="progress"):
        ctx.report_progress(done, total, message)  # type: ignore[arg-type]
    assert ctx.progress == ProgressReport(1.0, 2.0, "fine")


def test_good_reports_are_kept_latest_first_from_any_thread() -> None:
    ctx = _context()
    assert ctx.progress is None
    ctx.report_progress(0)
    assert ctx.progress == ProgressReport(0.0, None, "")
    reporter = threading.Thread(target=ctx.report_progress, args=(2.5, 10, "x" * 256))
    reporter.start()
    reporter.join()
    assert ctx.progress == ProgressReport(2.5, 10.0, "x" * 256)
    assert ProgressReport(37, 100, "resizing images").summary() == "37/100 (37%) resizing images"
    assert ProgressReport(3, None, "").summary() == "3"


class _Stream:
    def __init__(self) -> None:
        self.sent: list[pb.Heartbeat] = []
        self.up = True

    def send(self, message: pb.ConnectRequest) -> bool:
        if self.up:
            self.sent.append(message.heartbeat)
        return self.up


def _running(table: RunTable, ctx: JobContext) -> None:
    assignment = pb.Assignment(attempt_id=ctx.attempt_id, job_id=ctx.job_id)
    table.runs[ctx.attempt_id] = Run(assignment, lease_deadline=math.inf, phase=Phase.RUNNING, ctx=ctx)


def _heartbeater() -> tuple[RunTable, Heartbeater, _Stream]:
    table, stream = RunTable(4), _Stream()
    beats = Heartbeater(
        table,
        interval=timedelta(seconds=1),
        lease=timedelta(seconds=60),
        send=stream.send,
        on_silence=lambda: None,
    )
    return table, beats, stream


def _reports(heartbeat: pb.Heartbeat) -> list[tuple[str, float, str]]:
    return [(r.attempt_id, r.progress.done, r.progress.message) for r in heartbeat.progress]


def test_reports_between_heartbeats_go_out_as_one_the_last_and_only_when_changed() -> None:
    table, beats, stream = _heartbeater()
    busy, quiet = _context("busy"), _context("quiet")
    _running(table, busy)
    _running(table, quiet)
    for n in range(1, 101):
        busy.report_progress(n, 100, f"item {n}")
    beats.beat()
    assert _reports(stream.sent[-1]) == [("busy", 100.0, "item 100")]
    assert stream.sent[-1].progress[0].progress.total == 100.0

    beats.answered([])
    beats.beat()  # nothing new: the heartbeat carries no report
    assert list(stream.sent[-1].attempt_ids) == ["busy", "quiet"] and _reports(stream.sent[-1]) == []

    beats.answered([])
    busy.report_progress(100, 100, "item 100")  # the same values, reported again
    quiet.report_progress(1)
    beats.beat()
    assert _reports(stream.sent[-1]) == [("busy", 100.0, "item 100"), ("quiet", 1.0, "")]
    assert not stream.sent[-1].progress[1].progress.HasField("total")


def test_a_report_whose_stream_is_gone_is_sent_again_on_the_next() -> None:
    table, beats, stream = _heartbeater()
    ctx = _context()
    _running(table, ctx)
    ctx.report_progress(5, 10, "half")
    beats.beat()
    assert _reports(stream.sent[-1]) == [("a1", 5.0, "half")]
    beats.reset()  # the stream ended before the answer: the report may be lost
    beats.beat()
    assert _reports(stream.sent[-1]) == [("a1", 5.0, "half")]
    beats.answered([])
    stream.up = False
    ctx.report_progress(6, 10, "more")
    beats.beat()  # not sent
    stream.up = True
    beats.beat()
    assert _reports(stream.sent[-1]) == [("a1", 6.0, "more")]
