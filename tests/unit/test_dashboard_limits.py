"""The dashboard's bounds that need no server: the sign-in limiter and the log sampler on
a fake clock, the address a limit applies to, and the host names the request guard
lets through."""

from __future__ import annotations

import pytest

from coordinator.dashboard.guard import allowed_hosts, host_name
from coordinator.dashboard.limits import LogSampler, SigninLimiter, client_key


class FakeTime:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_client_gets_its_burst_then_one_attempt_per_refill() -> None:
    time = FakeTime()
    limiter = SigninLimiter(burst=3, refill_per_s=0.5, max_clients=10, now=time)

    assert [limiter.allow("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert limiter.retry_after_s("10.0.0.1") == 2
    time.now_s += 1.9
    assert not limiter.allow("10.0.0.1")
    time.now_s += 0.1
    assert limiter.allow("10.0.0.1") and not limiter.allow("10.0.0.1")
    time.now_s += 3_600  # a long pause earns the burst back, no more
    assert [limiter.allow("10.0.0.1") for _ in range(4)] == [True, True, True, False]


def test_clients_have_their_own_buckets() -> None:
    limiter = SigninLimiter(burst=1, refill_per_s=0.1, max_clients=10, now=FakeTime())
    assert limiter.allow("10.0.0.1") and not limiter.allow("10.0.0.1")
    assert limiter.allow("10.0.0.2")


def test_the_table_of_clients_stays_bounded_forgetting_the_least_recently_seen() -> None:
    limiter = SigninLimiter(burst=1, refill_per_s=0.001, max_clients=3, now=FakeTime())
    for client in ("a", "b", "c"):
        assert limiter.allow(client)
    assert not limiter.allow("a")  # seen again: now the most recent
    for n in range(1_000):
        limiter.allow(f"spray-{n}")
    assert len(limiter) == 3


def test_the_time_going_backwards_earns_nothing() -> None:
    time = FakeTime()
    limiter = SigninLimiter(burst=1, refill_per_s=1.0, max_clients=3, now=time)
    assert limiter.allow("a")
    time.now_s -= 100
    assert not limiter.allow("a")


def test_a_limit_needs_sane_settings() -> None:
    with pytest.raises(ValueError, match="burst"):
        SigninLimiter(burst=0, refill_per_s=1.0, max_clients=1, now=FakeTime())


def test_the_log_gets_one_line_per_client_and_interval_with_the_count() -> None:
    time = FakeTime()
    sampler = LogSampler(interval_s=60.0, max_clients=10, now=time)

    assert sampler.note("a") == 1  # the first is logged
    assert [sampler.note("a") for _ in range(99)] == [0] * 99
    assert sampler.note("b") == 1  # another client has its own line
    time.now_s += 60
    assert sampler.note("a") == 100  # this one and the 99 not logged


def test_the_samplers_table_stays_bounded() -> None:
    sampler = LogSampler(interval_s=60.0, max_clients=5, now=FakeTime())
    for n in range(1_000):
        sampler.note(f"client-{n}")
    assert len(sampler) == 5


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("10.1.2.3", "10.1.2.3"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"),  # the same /64: the same bucket
        (None, "unknown"),
        ("a-unix-socket" * 20, ("a-unix-socket" * 20)[:64]),
    ],
)
def test_a_limit_applies_to_an_address_or_an_ipv6_64(host: str | None, key: str) -> None:
    assert client_key(host) == key


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:7235", "127.0.0.1"),
        ("LocalHost:7235", "localhost"),
        ("[::1]:7235", "::1"),
        ("runwick.internal", "runwick.internal"),
        ("", None),
        ("evil.example:7235/x", None),
        ("user@host", None),
        ("host:port", None),
    ],
)
def test_the_host_name_of_a_host_header(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_a_loopback_bind_answers_the_loopback_names_and_the_listed_ones_only() -> None:
    assert allowed_hosts("127.0.0.1", ()) == frozenset({"127.0.0.1", "localhost", "::1"})
    assert allowed_hosts("::1", ["Dash.Example"]) == frozenset(
        {"127.0.0.1", "localhost", "::1", "dash.example"}
    )


def test_a_named_bind_answers_its_name_and_a_wildcard_bind_any_unless_names_are_listed() -> None:
    assert allowed_hosts("10.0.0.5", ["runwick.internal"]) == frozenset({"10.0.0.5", "runwick.internal"})
    assert allowed_hosts("0.0.0.0", ()) is None
    assert allowed_hosts("::", ["runwick.internal"]) == frozenset(
        {"runwick.internal", "127.0.0.1", "localhost", "::1"}
    )


def test_allowed_host_flags_are_names_or_addresses_without_ports() -> None:
    from coordinator.cli.serve import _host_names
    from coordinator.config import ConfigError

    assert _host_names(["Runwick.Internal", " [::1] ", "10.0.0.5"]) == (
        "runwick.internal",
        "[::1]",
        "10.0.0.5",
    )
    for bad in ("", "host:7235", "a b", "http://host", "host/x"):
        with pytest.raises(ConfigError, match="not a host name"):
            _host_names([bad])
