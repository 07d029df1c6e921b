"""``runwick jobs cancel|retry|reveal-error``.

``cancel`` and ``retry`` take one job ID, or select jobs by filter (``--state``,
``--queue``, ``--wire-name``): then one bulk RPC does the work on the coordinator, in
bounded batches, each job audited as a single cancel or retry is. Before a bulk action
the command asks for confirmation (``--yes`` skips it); a spinner shows on stderr only
when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator

from rich.console import Console

from coordinator.cli.connect import add_connection_flags
from coordinator.cli.exits import confirmed
from coordinator.cli.output import emit, fields_view, output_mode, to_json
from worker_sdk import BulkResult, Client, JobInfo, JobState

_RETRYABLE = {JobState.FAILED, JobState.CANCELLED}
_PREVIEW = 500
"""Jobs listed to count a bulk action's selection before asking."""


def add_manage_commands(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], states: list[str]
) -> None:
    helps = {
        "cancel": "cancel a job, or every job a filter selects that has not ended (needs manage)",
        "retry": "retry a failed or cancelled job by hand, or every one a filter selects (needs manage)",
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
    reveal.add_argument("attempt_id", help="the attempt's ID (from `jobs get`)")
    add_connection_flags(reveal)


def _reveal_error(client: Client, options: argparse.Namespace) -> int:
    revealed = client.reveal_error(options.attempt_id)
    if output_mode(options) == "json":
        emit({"revealed": to_json(revealed)})
        return 0
    fields_view(
        [
            ("attempt", revealed.attempt_id),
            ("job", revealed.job_id),
            ("generation", str(revealed.generation)),
            ("code", revealed.error_code or "-"),
            ("exception type", revealed.exception_type or "-"),
            ("message", revealed.message or "-"),
        ]
    )
    if revealed.detail:
        print()
        print(revealed.detail.rstrip("\n"))
    return 0


def _cancel(client: Client, options: argparse.Namespace) -> int:
    if options.job_id:
        _no_filters(options)
        return _show_one(client.cancel(options.job_id), options, _cancel_result)
    return _bulk(client, options, "cancel", lambda job: not job.state.terminal)


def _retry(client: Client, options: argparse.Namespace) -> int:
    if options.job_id:
        _no_filters(options)
        job = client.retry(options.job_id, include_dependents=options.include_dependents)
        return _show_one(job, options, _retry_result)
    return _bulk(client, options, "retry", lambda job: job.state in _RETRYABLE)


MANAGE_COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "cancel": _cancel,
    "retry": _retry,
    "reveal-error": _reveal_error,
}


def _filters(options: argparse.Namespace) -> dict[str, str]:
    found = {"state": options.state, "queue": options.queue, "wire name": options.wire_name}
    return {name: value for name, value in found.items() if value}


def _no_filters(options: argparse.Namespace) -> None:
    if _filters(options):
        raise ValueError("give a job ID or filters (--state, --queue, --wire-name), not both")


def _show_one(job: JobInfo, options: argparse.Namespace, describe: Callable[[JobInfo], str]) -> int:
    if output_mode(options) == "json":
        emit({"job": to_json(job)})
    else:
        print(describe(job))
    return 0


def _cancel_result(job: JobInfo) -> str:
    if job.state is JobState.CANCELLED:
        return f"{job.id}  cancelled"
    return f"{job.id}  cancel requested: its worker is stopping the run; it ends cancelled"


def _retry_result(job: JobInfo) -> str:
    return f"{job.id}  {job.state.value}, generation {job.generation}"


def _bulk(client: Client, options: argparse.Namespace, verb: str, eligible: Callable[[JobInfo], bool]) -> int:
    chosen = _filters(options)
    if not chosen:
        raise ValueError("give a job ID, or select jobs with --state, --queue or --wire-name")
    what = ", ".join(f"{name} {value}" for name, value in chosen.items())
    filters = {"queue": options.queue, "state": options.state, "wire_name": options.wire_name}
    if not options.yes:
        page, more = client.list_jobs_page(**filters, page_size=_PREVIEW)
        count = sum(1 for job in page if eligible(job))
        if not count and not more:
            print(f"no job to {verb} ({what})", file=sys.stderr)
            return 0
        many = f"about {count}+" if more else str(count)
        refused = confirmed(
            f"{verb.capitalize()} {many} job(s) ({what})?",
            refusal_without_terminal=f"{verb} acts on {many} job(s) ({what})",
        )
        if refused is not None:
            return refused
    with _spinner(f"{verb} of the jobs with {what} in progress on the coordinator"):
        if verb == "cancel":
            result = client.bulk_cancel(**filters)
        else:
            result = client.bulk_retry(**filters, include_dependents=options.include_dependents)
    _show_bulk(verb, result, options)
    return 0


def _show_bulk(verb: str, result: BulkResult, options: argparse.Namespace) -> None:
    skipped = [to_json(s) for s in result.skipped_jobs]
    if output_mode(options) == "json":
        if verb == "cancel":
            counts = {"cancelled": result.done, "cancel_requested": result.cancel_requested}
        else:
            counts = {"retried": result.done, "reopened": result.reopened}
        emit({**counts, "skipped": result.skipped, "skipped_jobs": skipped})
        return
    if verb == "cancel":
        line = f"cancelled {result.done}, cancel requested {result.cancel_requested} (running)"
    else:
        line = f"retried {result.done}"
        if options.include_dependents:
            line += f", dependents re-opened {result.reopened}"
    print(f"{line}, skipped {result.skipped}")
    for job in result.skipped_jobs:
        print(f"  {job.job_id}  {job.reason}: {job.message}")
    if result.skipped > len(result.skipped_jobs):
        print(f"  ... and {result.skipped - len(result.skipped_jobs)} more")


@contextlib.contextmanager
def _spinner(text: str) -> Iterator[None]:
    """A spinner on stderr while the call runs, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    with Console(stderr=True).status(text):
        yield
