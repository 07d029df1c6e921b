"""SIGTERM stops the bench even when the handler's first KeyboardInterrupt is dropped (as
it is when the signal lands in a garbage collector's callback)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from coordinator.cli.bench import stopping


@pytest.fixture
def installed() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    stopping.install()
    yield
    signal.signal(signal.SIGTERM, before)


def test_a_stop_whose_first_raise_was_lost_is_raised_by_the_next_wait(installed: None) -> None:
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)
    with pytest.raises(KeyboardInterrupt):  # where a callback would print and drop it
        handler(signal.SIGTERM, None)
    with pytest.raises(KeyboardInterrupt):
        stopping.pause(0)
    with pytest.raises(KeyboardInterrupt):
        stopping.check()


def test_no_stop_asked_lets_waits_run_and_install_forgets_an_earlier_one(installed: None) -> None:
    stopping.pause(0)
    stopping.check()
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGTERM, None)
    stopping.install()
    stopping.pause(0)  # a new run starts with no stop pending
