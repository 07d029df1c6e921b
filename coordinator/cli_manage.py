"""``runwick jobs cancel|retry|reveal-error``.

``cancel`` and ``retry`` take one job ID, or select jobs by filter (``--state``,
``--queue``, ``--wire-name``) and act on each after a confirmation (``--yes`` skips it),
with a progress bar on stderr. A job whose state changed in between is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeAlias

import grpc
from google.protobuf.json_format import MessageToDict

from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2

Stub: TypeAlias = Any
"""A ``JobServiceStub`` (generated code is untyped)."""
_TERMINAL = {job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_FAILED, job_pb2.JOB_STATE_CANCELLED}
_RETRYABLE = {job_pb2.JOB_STATE_FAILED, job_pb2.JOB_STATE_CANCELLED}
_SKIPPED = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND}
_PAGE_SIZE = 500
_BAR_WIDTH = 30


def add_manage_commands(
    actions: Any, common: Callable[[argparse.ArgumentParser], None], states: list[str]
) -> None:
    helps = {
        "cancel": "cancel a job, or every job a filter selects (R-8; needs the manage scope)",
        "retry": "retry a failed or cancelled job by hand, or every one a filter selects "
        "(R-9; needs the manage scope)",
    }
    for name, text in helps.items():
        parser = actions.add_parser(name, help=text)
        parser.add_argument("job_id", nargs="?", help="the job; omit it to select jobs by filter")
        parser.add_argument("--state", choices=states, help="bulk: only jobs in this state")
        parser.add_argument("--queue", help="bulk: only jobs of this queue")
        parser.add_argument("--wire-name", help="bulk: only jobs of this wire name")
        parser.add_argument("--yes", "-y", action="store_true", help="bulk: do not ask for confirmation")
        common(parser)
    reveal = actions.add_parser(
        "reveal-error",
        help="show an attempt's exception message and full text (needs the reveal scope; audited)",
    )
    reveal.add_argument("attempt_id")
    common(reveal)


def _cancel(stub: Stub, options: argparse.Namespace) -> int:
    return _one_or_many(stub, options, _CANCEL)


def _retry(stub: Stub, options: argparse.Namespace) -> int:
    return _one_or_many(stub, options, _RETRY)


def _reveal_error(stub: Stub, options: argparse.Namespace) -> int:
    revealed = stub.RevealError(job_service_pb2.RevealErrorRequest(attempt_id=options.attempt_id))
    if options.json:
        print(json.dumps(MessageToDict(revealed, preserving_proto_field_name=True)))
        return 0
    rows = [
        ("attempt", revealed.attempt_id),
        ("job", revealed.job_id),
        ("generation", str(revealed.generation)),
        ("code", revealed.error_code or "-"),
        ("exception type", revealed.exception_type or "-"),
        ("message", revealed.message or "-"),
    ]
    for name, value in rows:
        print(f"{name.ljust(14)}  {value}")
    if revealed.detail:
        print()
        print(revealed.detail.rstrip("\n"))
    return 0


MANAGE_COMMANDS: dict[str, Callable[[Stub, argparse.Namespace], int]] = {
    "cancel": _cancel,
    "retry": _retry,
    "reveal-error": _reveal_error,
}


@dataclass(frozen=True)
class _Action:
    verb: str
    done: str
    eligible: Callable[[job_pb2.Job], bool]
    call: Callable[[Stub, str], job_pb2.Job]
    describe: Callable[[job_pb2.Job], str]


def _cancel_call(stub: Stub, job_id: str) -> job_pb2.Job:
    job: job_pb2.Job = stub.CancelJob(job_service_pb2.CancelJobRequest(id=job_id)).job
    return job


def _retry_call(stub: Stub, job_id: str) -> job_pb2.Job:
    job: job_pb2.Job = stub.RetryJob(job_service_pb2.RetryJobRequest(id=job_id)).job
    return job


def _cancel_result(job: job_pb2.Job) -> str:
    if job.state == job_pb2.JOB_STATE_CANCELLED:
        return f"{job.id}  cancelled"
    return f"{job.id}  cancel requested: its worker is stopping the run; it ends cancelled"


def _retry_result(job: job_pb2.Job) -> str:
    return f"{job.id}  {_state(job.state)}, generation {job.generation}"


_CANCEL = _Action("cancel", "cancelled", lambda j: j.state not in _TERMINAL, _cancel_call, _cancel_result)
_RETRY = _Action("retry", "retried", lambda j: j.state in _RETRYABLE, _retry_call, _retry_result)


@dataclass
class _Tally:
    done: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _one_or_many(stub: Stub, options: argparse.Namespace, action: _Action) -> int:
    filters = {"state": options.state, "queue": options.queue, "wire name": options.wire_name}
    chosen = {name: value for name, value in filters.items() if value}
    if options.job_id and chosen:
        raise ValueError("give a job ID or filters (--state, --queue, --wire-name), not both")
    if options.job_id:
        job = action.call(stub, options.job_id)
        if options.json:
            print(json.dumps(MessageToDict(job, preserving_proto_field_name=True)))
        else:
            print(action.describe(job))
        return 0
    if not chosen:
        raise ValueError("give a job ID, or select jobs with --state, --queue or --wire-name")
    selected = [job.id for job in _matching(stub, options) if action.eligible(job)]
    what = ", ".join(f"{name} {value}" for name, value in chosen.items())
    if not selected:
        print(f"no job to {action.verb} ({what})", file=sys.stderr)
        return 0
    if not options.yes and not _confirm(f"{action.verb.capitalize()} {len(selected)} job(s) ({what})?"):
        print("runwick: nothing done", file=sys.stderr)
        return 1
    tally = _Tally()
    for index, job_id in enumerate(selected, start=1):
        try:
            action.call(stub, job_id)
            tally.done.append(job_id)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                _progress(sys.stderr, index - 1, len(selected), action.done, end=True)
                raise
            target = tally.skipped if exc.code() in _SKIPPED else tally.failed
            target[job_id] = f"{exc.code().name}: {exc.details()}"
        _progress(sys.stderr, index, len(selected), action.done, end=index == len(selected))
    if options.json:
        print(json.dumps({action.done: tally.done, "skipped": tally.skipped, "failed": tally.failed}))
    else:
        print(f"{action.done} {len(tally.done)}, skipped {len(tally.skipped)}, failed {len(tally.failed)}")
        for job_id, reason in {**tally.skipped, **tally.failed}.items():
            print(f"  {job_id}  {reason}")
    return 1 if tally.failed else 0


def _matching(stub: Stub, options: argparse.Namespace) -> Iterator[job_pb2.Job]:
    """Every job the filters select (all pages), listed before anything changes."""
    request = job_service_pb2.ListJobsRequest(
        queue=options.queue or "", wire_name=options.wire_name or "", page_size=_PAGE_SIZE
    )
    if options.state:
        request.state = job_pb2.JobState.Value(f"JOB_STATE_{options.state.upper()}")  # type: ignore[assignment]
    jobs: list[job_pb2.Job] = []
    while True:
        page = stub.ListJobs(request)
        jobs.extend(page.jobs)
        if not page.next_page_token:
            return iter(jobs)
        request.page_token = page.next_page_token


def _confirm(question: str) -> bool:
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        print(file=sys.stderr)
        return False
    return answer.strip().lower() in ("y", "yes")


def _progress(stream: TextIO, done: int, total: int, verb: str, *, end: bool) -> None:
    filled = _BAR_WIDTH * done // total if total else _BAR_WIDTH
    bar = "#" * filled + "." * (_BAR_WIDTH - filled)
    stream.write(f"\r[{bar}] {done}/{total} {verb}")
    if end:
        stream.write("\n")
    stream.flush()


def _state(value: int) -> str:
    return job_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()
