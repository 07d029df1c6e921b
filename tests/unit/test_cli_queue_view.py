"""``runwick queues get`` for people (``cli.queue_view``): the keys at their limit or rate
named up to the five the coordinator sends, with how many more, the implicit key shown
as ``(no key)``; every state with ``--output wide``."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from coordinator.cli.queue_view import show_queue
from worker_sdk import JobState, QueueInfo, QueueRateInfo


def _lines(capsys: pytest.CaptureFixture[str], queue: QueueInfo, output: str = "table") -> dict[str, str]:
    assert show_queue(queue, argparse.Namespace(output=output, json=False)) == 0
    return {line[:15].strip(): line[15:] for line in capsys.readouterr().out.splitlines()}


def test_the_keys_named_say_how_many_more_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    queue = QueueInfo(
        "reports",
        False,
        None,
        {JobState.AVAILABLE: 40, JobState.RESERVED: 6},
        timedelta(seconds=2.4),
        key_limit=2,
        active_keys=8,
        keys_at_limit=8,
        rate=QueueRateInfo(100, timedelta(minutes=1), per_key=True),
        keys_at_rate=1,
        first_keys_at_limit=("", "a", "b", "c", "d"),
        first_keys_at_rate=("",),
        held_back={"key_limit": 30, "rate": 4},
        runnable=6,
    )

    shown = _lines(capsys, queue)

    assert shown["keys"] == "8 active, 8 at limit, 1 at rate"
    assert shown["keys at limit"] == "(no key), a, b, c, d (+3 more)"
    assert shown["keys at rate"] == "(no key)"
    assert (shown["rate"], shown["held back"], shown["runnable now"]) == (
        "100/1m per key",
        "key_limit 30, rate 4",
        "6",
    )
    assert shown["oldest due"] == "2.4s ago"
    wide = _lines(capsys, queue, "wide")
    assert wide["jobs"] == (
        "scheduled 0, waiting 0, available 40, reserved 6, running 0, succeeded 0, failed 0, cancelled 0"
    )


def test_a_queue_a_change_answered_shows_dashes_not_zeros(capsys: pytest.CaptureFixture[str]) -> None:
    """A QueueInfo without what GetQueue weighs (``runnable`` None) does not claim 0."""
    shown = _lines(capsys, QueueInfo("mail", True, 3))

    assert (shown["state"], shown["limit"], shown["per-key limit"]) == ("paused (no new claims)", "3", "none")
    assert (shown["held back"], shown["runnable now"], shown["oldest due"]) == ("-", "-", "none due")
    free = _lines(capsys, QueueInfo("mail", False, None, held_back={}, runnable=2))
    assert (free["held back"], free["runnable now"]) == ("- (no controls)", "2")
