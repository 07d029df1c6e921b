"""Per-client bounds on sign-in: a token bucket per client address that refuses guessing
at speed (429), and a log sampler that writes at most one line per address per interval,
so neither the attempts nor the log grow with an attacker's rate.

Both remember a bounded number of addresses (least recently seen forgotten first) and
take the time from a callable, so tests drive them with a fake clock. They are per
process: each replica limits what reaches it.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

Now = Callable[[], float]
"""Seconds on a monotonic clock."""


def client_key(host: str | None) -> str:
    """The address a limit applies to: an IPv4 address as is, an IPv6 address by its /64
    (one host gets a whole /64 and could rotate through it), anything else as given."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:64]
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    refilled_at_s: float


class SigninLimiter:
    """A token bucket per client: ``burst`` attempts at once, ``refill_per_s`` more each
    second after, for at most ``max_clients`` addresses."""

    def __init__(self, *, burst: int, refill_per_s: float, max_clients: int, now: Now) -> None:
        if burst < 1 or refill_per_s <= 0 or max_clients < 1:
            raise ValueError("a sign-in limit needs a burst of 1 or more, a positive refill and a client")
        self.burst = burst
        self.refill_per_s = refill_per_s
        self.max_clients = max_clients
        self._now = now
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def allow(self, client: str) -> bool:
        """Takes one attempt from ``client``'s bucket; False when it is empty."""
        now = self._now()
        bucket = self._buckets.pop(client, None)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        else:
            earned = max(now - bucket.refilled_at_s, 0.0) * self.refill_per_s
            bucket.tokens = min(float(self.burst), bucket.tokens + earned)
            bucket.refilled_at_s = now
        self._buckets[client] = bucket  # most recently seen last
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def retry_after_s(self, client: str) -> int:
        """Whole seconds until ``client`` has an attempt again (at least 1)."""
        bucket = self._buckets.get(client)
        missing = 1.0 - (bucket.tokens if bucket is not None else 1.0)
        return max(1, int(-(-missing // self.refill_per_s)))

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass(slots=True)
class _Tally:
    logged_at_s: float
    unlogged: int


class LogSampler:
    """Decides which events of a kind get a log line: the first of a client's, then at
    most one per ``interval_s``, carrying how many it stands for."""

    def __init__(self, *, interval_s: float, max_clients: int, now: Now) -> None:
        self.interval_s = interval_s
        self.max_clients = max_clients
        self._now = now
        self._tallies: OrderedDict[str, _Tally] = OrderedDict()

    def note(self, client: str) -> int:
        """Records one event; returns how many events a line written now stands for
        (this one and those not logged since the last line), or 0: write none."""
        now = self._now()
        tally = self._tallies.pop(client, None)
        if tally is None or now - tally.logged_at_s >= self.interval_s:
            count = 1 + (tally.unlogged if tally is not None else 0)
            tally = _Tally(now, 0)
        else:
            tally.unlogged += 1
            count = 0
        self._tallies[client] = tally
        while len(self._tallies) > self.max_clients:
            self._tallies.popitem(last=False)
        return count

    def __len__(self) -> int:
        return len(self._tallies)
