"""SIGTERM stops the bench as Ctrl-C does: what it started is stopped, and it exits 130.

The handler raises KeyboardInterrupt wherever the main thread is. Python runs a signal
handler between any two bytecodes, also inside a callback of the garbage collector
(SQLAlchemy's event registry has weakref callbacks), where an exception is printed as
"Exception ignored" and dropped: the bench then ran on to its end and exited 0 (one
SIGTERM in four in ``tests/e2e/test_bench.py``). So the handler also sets a flag, and
every wait of the bench (``pause``) raises again while it is set."""

from __future__ import annotations

import signal
import time


class _Request:
    """Whether a stop was asked for (a plain attribute: the handler takes no lock)."""

    asked = False


_REQUEST = _Request()


def install() -> None:
    """SIGTERM interrupts from now on (and no earlier request is pending)."""
    _REQUEST.asked = False
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    _REQUEST.asked = True
    raise KeyboardInterrupt


def check() -> None:
    """Raises KeyboardInterrupt if a stop was asked for, even if its first raise was lost."""
    if _REQUEST.asked:
        raise KeyboardInterrupt


def pause(seconds: float) -> None:
    """``time.sleep`` that a stop asked for before, during or after it interrupts."""
    check()
    time.sleep(seconds)
    check()
