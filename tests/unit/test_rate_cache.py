"""The store's memory of queues seen without a rate (``store.rate_cache``), on a fake
clock: trusted for ``UNRATED_TTL_S``, forgotten when a rate is seen, bounded."""

from __future__ import annotations

from coordinator.store.rate_cache import UNRATED_TTL_S, UnratedQueues


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_queue_seen_unrated_is_trusted_for_a_while_then_counted_again() -> None:
    clock = FakeClock()
    cache = UnratedQueues(10, clock)
    assert not cache.unrated("mail")  # never seen: its starts are counted
    cache.learn({"mail": False, "geo": True})
    assert cache.unrated("mail") and not cache.unrated("geo")
    clock.now += UNRATED_TTL_S
    assert not cache.unrated("mail")


def test_a_rate_seen_later_ends_the_trust_at_once() -> None:
    cache = UnratedQueues(10, FakeClock())
    cache.learn({"mail": False})
    cache.learn({"mail": True})
    assert not cache.unrated("mail")


def test_the_memory_is_bounded() -> None:
    cache = UnratedQueues(3, FakeClock())
    cache.learn({f"q{n}": False for n in range(4)})
    assert not any(cache.unrated(f"q{n}") for n in range(4))
