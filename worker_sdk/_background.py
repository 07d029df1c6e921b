"""``Worker.start_in_background()``: a worker on a thread with its own event loop, for
hosts that have no loop of their own (Django, Flask, gunicorn's sync workers, scripts).

The thread runs ``await worker.start()``, then waits for ``stop``, then drains as
``await worker.stop()`` does (R-12). ``stop`` is also called when the interpreter exits
normally — before ``concurrent.futures`` shuts its pools down, so sync handlers still
running get their drain — which is how a host's own graceful shutdown (gunicorn's
SIGTERM, ``manage.py`` ending) drains the worker.

Forking: gRPC channels and threads do not survive ``fork()``. Start the worker in the
process that will run it — under gunicorn's pre-fork model in each worker process, after
the fork (a ``post_worker_init`` or ``post_fork`` hook), never in the master. A handle
used in a forked child refuses with a RuntimeError saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # its exit hook must be registered before ours (see the end)
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from datetime import timedelta

logger = logging.getLogger(__name__)

_handles: weakref.WeakSet[BackgroundWorker] = weakref.WeakSet()
"""Running handles of this process, stopped at interpreter exit."""


class BackgroundWorker:
    """A handle on a worker running on its own thread (``Worker.start_in_background``).

    Call ``stop(timeout)`` to drain and stop it; it also stops by itself when the
    interpreter exits normally.
    """

    def __init__(
        self,
        worker_id: str,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
        drain_timeout: timedelta,
    ) -> None:
        self.worker_id = worker_id
        self._start = start
        self._stop = stop
        self._drain_timeout = drain_timeout
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"runwick-worker-{worker_id}", daemon=True)

    @property
    def running(self) -> bool:
        """True from a successful start until the thread has stopped."""
        return self._thread.is_alive() and self._start_error is None

    def _launch(self, timeout_s: float) -> None:
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise TimeoutError(f"the worker's thread did not start within {timeout_s:g}s")
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        _handles.add(self)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException:  # pragma: no cover - a crash of the loop itself
            logger.exception("background worker %s crashed", self.worker_id)
        finally:
            self._started.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        try:
            await self._start()
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            return
        self._started.set()
        try:
            await self._stop_event.wait()
        finally:
            await self._stop()

    def stop(self, timeout: timedelta | float | None = None) -> bool:
        """Drains and stops the worker (R-12) and waits for its thread.

        Args:
            timeout: How long to wait, a timedelta or seconds; default the worker's
                ``drain_timeout`` plus 10 s for the last acknowledgements.

        Returns:
            True when the worker stopped within ``timeout`` (safe to call again).

        Raises:
            RuntimeError: Called in a process forked after the worker started: the
                worker runs only in the process that started it.
        """
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"this worker was started in process {self._pid}, before a fork; start it after the "
                "fork, in the process that runs it (e.g. gunicorn's post_worker_init hook)"
            )
        if isinstance(timeout, timedelta):
            timeout_s: float | None = timeout.total_seconds()
        elif timeout is None:
            timeout_s = self._drain_timeout.total_seconds() + 10
        else:
            timeout_s = float(timeout)
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        stopped = not self._thread.is_alive()
        if stopped:
            _handles.discard(self)
        return stopped


def start_in_background(
    worker_id: str,
    start: Callable[[], Awaitable[None]],
    stop: Callable[[], Awaitable[None]],
    drain_timeout: timedelta,
    start_timeout_s: float,
) -> BackgroundWorker:
    handle = BackgroundWorker(worker_id, start, stop, drain_timeout)
    handle._launch(start_timeout_s)
    return handle


def _stop_all_at_exit() -> None:
    for handle in list(_handles):
        if handle._pid == os.getpid():
            logger.info("interpreter exiting: draining background worker %s", handle.worker_id)
            handle.stop()


def _forget_in_child() -> None:
    # A forked child has no copy of the thread: nothing of the parent's to stop there.
    _handles.clear()


# Runs when the interpreter exits, before non-daemon threads are joined and before
# concurrent.futures stops taking work (its hook was registered earlier, at its import
# above, and these run last-registered first): running sync handlers can still finish
# in the drain.
assert concurrent.futures.thread
threading._register_atexit(_stop_all_at_exit)  # type: ignore[attr-defined]
os.register_at_fork(after_in_child=_forget_in_child)
