"""The dashboard's pure pieces: cookie names and CSRF tokens, the filters pages use,
and the throughput summary of the overview."""

from __future__ import annotations

import pytest

from coordinator.dashboard.render import format_duration, preview
from coordinator.dashboard.requests import local_path
from coordinator.dashboard.sessions import CookieNames, csrf_token, same
from coordinator.domain.activity import MINUTE_MS, throughput
from coordinator.domain.records import FinishedMinute
from coordinator.domain.states import JobState

SESSION = "A" * 43
OTHER_SESSION = "B" * 43


def test_cookies_under_tls_are_host_only_and_secure_and_plain_over_http() -> None:
    # Sessions themselves (expiry, forged IDs, revocation) are the store's: see
    # tests/contract/test_dashboard_sessions.py.
    tls, plain = CookieNames.for_tls(True), CookieNames.for_tls(False)
    assert (tls.session, tls.signin, tls.signin_path, tls.secure) == (
        "__Host-runwick_session",
        "__Host-runwick_signin",
        "/",  # __Host- cookies must be Path=/
        True,
    )
    assert (plain.session, plain.signin, plain.signin_path, plain.secure) == (
        "runwick_session",
        "runwick_signin",
        "/signin",
        False,
    )


def test_csrf_tokens_are_per_session_and_compared_whole() -> None:
    first, second = csrf_token(SESSION), csrf_token(OTHER_SESSION)
    assert first != second and SESSION not in first
    assert first == csrf_token(SESSION)  # any replica derives the same one
    assert same(first, first)
    assert not same(first[:-1], first)
    assert not same(None, first) and not same("", first)


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
