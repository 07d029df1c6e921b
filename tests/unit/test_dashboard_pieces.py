"""The dashboard's pure pieces: session cookies and CSRF tokens, the filters pages use,
and the throughput summary of the overview."""

from __future__ import annotations

import pytest

from coordinator.dashboard.render import format_duration, preview
from coordinator.dashboard.requests import local_path
from coordinator.dashboard.sessions import Session, read_session, same
from coordinator.domain.activity import MINUTE_MS, throughput
from coordinator.domain.records import FinishedMinute
from coordinator.domain.states import JobState

TOKEN = "rwk_0123456789abcdef_secret-part"
NOW = 1_800_000_000_000
TTL = 3_600_000


def test_a_session_cookie_reads_back_until_it_expires() -> None:
    cookie = Session(TOKEN, NOW).cookie_value()
    assert read_session(cookie, NOW, TTL) == Session(TOKEN, NOW)
    assert read_session(cookie, NOW + TTL, TTL) == Session(TOKEN, NOW)
    assert read_session(cookie, NOW + TTL + 1, TTL) is None
    assert read_session(cookie, NOW - 61_000, TTL) is None  # issued "in the future"


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "v1",
        "v2." + Session(TOKEN, NOW).cookie_value()[3:],
        Session(TOKEN, NOW).cookie_value().replace(f".{NOW}.", f".{NOW + 1}."),
        Session(TOKEN, NOW).cookie_value() + "x",
        "v1.abc.mac.token",
        "v1." + str(NOW) + "." + "A" * 43 + "." + "x" * 2_000,
    ],
)
def test_a_malformed_or_forged_cookie_is_no_session(value: str | None) -> None:
    assert read_session(value, NOW, TTL) is None


def test_csrf_tokens_are_per_session_and_compared_whole() -> None:
    first, second = Session(TOKEN, NOW), Session(TOKEN, NOW + 1)
    assert first.csrf_token() != second.csrf_token()
    assert first.csrf_token() != Session(TOKEN + "x", NOW).csrf_token()
    assert same(first.csrf_token(), first.csrf_token())
    assert not same(first.csrf_token()[:-1], first.csrf_token())
    assert not same(None, first.csrf_token()) and not same("", first.csrf_token())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/jobs?state=failed", "/jobs?state=failed"),
        ("/", "/"),
        (None, "/"),
        ("", "/"),
        ("jobs", "/"),
        ("//evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
    ],
)
def test_only_local_paths_are_redirect_targets(value: str | None, expected: str) -> None:
    assert local_path(value) == expected


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "–"),
        (-5, "0 ms"),
        (850, "850 ms"),
        (12_345, "12.3 s"),
        (245_000, "4m 05s"),
        (7_800_000, "2h 10m"),
        (3 * 86_400_000 + 4 * 3_600_000, "3d 4h"),
    ],
)
def test_durations_read_at_a_glance(ms: int | None, text: str) -> None:
    assert format_duration(ms) == text


def test_a_preview_shows_text_or_hex_and_says_when_it_is_cut() -> None:
    assert preview(None)["kind"] == "none"
    assert preview(b'{"a": 1}') == {"kind": "text", "text": '{"a": 1}', "size": 8, "cut": False}
    binary = preview(b"\xff\x00\x01")
    assert binary["kind"] == "hex" and binary["text"] == "ff 00 01"
    long = preview("é".encode() * 5_000)  # 10,000 bytes; the cut falls inside a character or not
    assert long["kind"] == "text" and long["cut"] and long["size"] == 10_000
    assert set(long["text"]) == {"é"}


def test_throughput_fills_every_minute_of_the_window_and_rates_failures() -> None:
    now = 100 * MINUTE_MS + 30_000
    counts = [
        FinishedMinute(100 * MINUTE_MS, "a", JobState.SUCCEEDED, 3),
        FinishedMinute(100 * MINUTE_MS, "b", JobState.FAILED, 1),
        FinishedMinute(99 * MINUTE_MS, "a", JobState.CANCELLED, 2),
        FinishedMinute(40 * MINUTE_MS, "a", JobState.SUCCEEDED, 50),  # before the hour
    ]
    hour = throughput(counts, now)
    assert len(hour.minutes) == 60 and hour.minutes[0].minute_ms == 41 * MINUTE_MS
    assert (hour.succeeded, hour.failed, hour.cancelled, hour.busiest) == (3, 1, 2, 4)
    assert hour.failure_rate == pytest.approx(0.25)
    assert throughput(counts, now, queue="b").failed == 1
    assert throughput([], now).failure_rate is None
