"""``runwick jobs cancel|retry|reveal-error``.

``cancel`` and ``retry`` take one job ID, or select jobs by filter (``--state``,
``--queue``, ``--wire-name``) and act on each after a confirmation (``--yes`` skips it),
with a progress bar on stderr. A job whose state changed in between is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from coordinator.cli.connect import add_connection_flags, failure
from coordinator.cli.output import job_json, revealed_json
from worker_sdk import (
    Client,
    FailedPrecondition,
    JobInfo,
    JobNotFound,
    JobState,
    PermissionDenied,
    RunwickError,
    Unauthenticated,
)

_RETRYABLE = {JobState.FAILED, JobState.CANCELLED}
_SKIPPED = (FailedPrecondition, JobNotFound)
"""Failures that mean the job changed since it was listed."""
_REFUSED = (Unauthenticated, PermissionDenied)
"""Failures that stop a bulk action: every other job would fail the same way."""
_PAGE_SIZE = 500
_BAR_WIDTH = 30


def add_manage_commands(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], states: list[str]
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
        if name == "retry":
            parser.add_argument(
                "--include-dependents",
                action="store_true",
                help="also re-open the descendants that failed parent_failed because of the job",
            )
        add_connection_flags(parser)
    reveal = actions.add_parser(
        "reveal-error",
        help="show an attempt's exception message and full text (needs the reveal scope; audited)",
    )
    reveal.add_argument("attempt_id")
    add_connection_flags(reveal)


def _cancel(client: Client, options: argparse.Namespace) -> int:
    return _one_or_many(client, options, _CANCEL)


def _retry(client: Client, options: argparse.Namespace) -> int:
    return _one_or_many(client, options, _RETRY)


def _reveal_error(client: Client, options: argparse.Namespace) -> int:
    revealed = client.reveal_error(options.attempt_id)
    if options.json:
        print(json.dumps(revealed_json(revealed)))
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


MANAGE_COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "cancel": _cancel,
    "retry": _retry,
    "reveal-error": _reveal_error,
}


@dataclass(frozen=True)
class _Action:
    verb: str
    done: str
    eligible: Callable[[JobInfo], bool]
    call: Callable[[Client, str, argparse.Namespace], JobInfo]
    describe: Callable[[JobInfo], str]


def _cancel_result(job: JobInfo) -> str:
    if job.state is JobState.CANCELLED:
        return f"{job.id}  cancelled"
    return f"{job.id}  cancel requested: its worker is stopping the run; it ends cancelled"


def _retry_result(job: JobInfo) -> str:
    return f"{job.id}  {job.state.value}, generation {job.generation}"


def _call_cancel(client: Client, job_id: str, options: argparse.Namespace) -> JobInfo:
    return client.cancel(job_id)


def _call_retry(client: Client, job_id: str, options: argparse.Namespace) -> JobInfo:
    return client.retry(job_id, include_dependents=options.include_dependents)


_CANCEL = _Action("cancel", "cancelled", lambda j: not j.state.terminal, _call_cancel, _cancel_result)
_RETRY = _Action("retry", "retried", lambda j: j.state in _RETRYABLE, _call_retry, _retry_result)


@dataclass
class _Tally:
    done: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _one_or_many(client: Client, options: argparse.Namespace, action: _Action) -> int:
    filters = {"state": options.state, "queue": options.queue, "wire name": options.wire_name}
    chosen = {name: value for name, value in filters.items() if value}
    if options.job_id and chosen:
        raise ValueError("give a job ID or filters (--state, --queue, --wire-name), not both")
    if options.job_id:
        job = action.call(client, options.job_id, options)
        if options.json:
            print(json.dumps(job_json(job)))
        else:
            print(action.describe(job))
        return 0
    if not chosen:
        raise ValueError("give a job ID, or select jobs with --state, --queue or --wire-name")
    # Every job the filters select (all pages), listed before anything changes.
    listed = client.list_jobs(
        queue=options.queue, state=options.state, wire_name=options.wire_name, page_size=_PAGE_SIZE
    )
    selected = [job.id for job in list(listed) if action.eligible(job)]
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
            action.call(client, job_id, options)
            tally.done.append(job_id)
        except RunwickError as exc:
            if exc.status_code is None:
                raise
            if isinstance(exc, _REFUSED):
                _progress(sys.stderr, index - 1, len(selected), action.done, end=True)
                raise
            target = tally.skipped if isinstance(exc, _SKIPPED) else tally.failed
            target[job_id] = failure(exc)
        _progress(sys.stderr, index, len(selected), action.done, end=index == len(selected))
    if options.json:
        print(json.dumps({action.done: tally.done, "skipped": tally.skipped, "failed": tally.failed}))
    else:
        print(f"{action.done} {len(tally.done)}, skipped {len(tally.skipped)}, failed {len(tally.failed)}")
        for job_id, reason in {**tally.skipped, **tally.failed}.items():
            print(f"  {job_id}  {reason}")
    return 1 if tally.failed else 0


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
