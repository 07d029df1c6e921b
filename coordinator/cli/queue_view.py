"""``runwick queues get QUEUE``: one queue for a person (issue 41: every limit visible),
or its ``QueueInfo`` as JSON. The lines answer "why does work wait here": the controls,
the keys at their limit or rate (the first few named), what each control holds back,
the jobs per state and the oldest due job's age."""

from __future__ import annotations

import argparse

from coordinator.cli.output import emit, fields_view, output_mode, to_json
from coordinator.domain.rates import format_period
from worker_sdk import JobState, QueueInfo

UNFINISHED = (
    JobState.SCHEDULED,
    JobState.WAITING,
    JobState.AVAILABLE,
    JobState.RESERVED,
    JobState.RUNNING,
)
"""The states a table shows; ``--output wide`` adds the terminal ones."""


def show_queue(queue: QueueInfo, options: argparse.Namespace) -> int:
    mode = output_mode(options)
    if mode == "json":
        emit({"queue": to_json(queue)})
        return 0
    age = queue.oldest_available_age
    states = list(JobState) if mode == "wide" else UNFINISHED
    fields_view(
        [
            ("queue", queue.name),
            ("state", "paused (no new claims)" if queue.paused else "running"),
            ("limit", _count_or_none(queue.concurrency_limit)),
            ("per-key limit", _count_or_none(queue.key_limit)),
            ("rate", rate_text(queue) if queue.rate is not None else "none"),
            ("keys", _keys(queue)),
            ("keys at limit", _named(queue.first_keys_at_limit, queue.keys_at_limit)),
            ("keys at rate", _named(queue.first_keys_at_rate, queue.keys_at_rate)),
            ("held back", _held(queue)),
            ("runnable now", _count_or_none(queue.runnable, "-")),
            ("jobs", ", ".join(f"{state.value} {queue.counts.get(state, 0)}" for state in states)),
            ("oldest due", f"{age.total_seconds():.1f}s ago" if age is not None else "none due"),
        ]
    )
    return 0


def rate_text(queue: QueueInfo) -> str:
    """``COUNT/PERIOD`` (``per key`` when it holds for each key), ``-`` without a rate."""
    if queue.rate is None:
        return "-"
    period_ms = round(queue.rate.period.total_seconds() * 1000)
    return f"{queue.rate.count}/{format_period(period_ms)}" + (" per key" if queue.rate.per_key else "")


def _count_or_none(value: int | None, none: str = "none") -> str:
    return str(value) if value is not None else none


def _keys(queue: QueueInfo) -> str:
    if queue.active_keys is None:
        return "- (no per-key limit or rate)"
    parts = [f"{queue.active_keys} active"]
    if queue.keys_at_limit is not None:
        parts.append(f"{queue.keys_at_limit} at limit")
    if queue.keys_at_rate is not None:
        parts.append(f"{queue.keys_at_rate} at rate")
    return ", ".join(parts)


def _named(first: tuple[str, ...], count: int | None) -> str:
    """The first keys named (``''``, the implicit key, shown as ``(no key)``), and how many
    more there are: the listing names 5 at most."""
    if not count:
        return "-"
    names = ", ".join(key or "(no key)" for key in first)
    return names + (f" (+{count - len(first)} more)" if count > len(first) else "")


def _held(queue: QueueInfo) -> str:
    """Each control's held-back jobs, in the claim's order (pause, limit, per-key limit,
    rate), as the coordinator sent them."""
    if queue.runnable is None:  # not weighed (a QueueInfo from another call than get_queue)
        return "-"
    if not queue.held_back:
        return "- (no controls)"
    return ", ".join(f"{kind} {count}" for kind, count in queue.held_back.items())
