"""``JobContext``: what a handler knows about its run, and its cancellation token."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from worker_sdk._errors import JobCancelled
from worker_sdk._progress import ProgressReport, checked_report

CancelCause = Literal["timeout", "cancelled", "shutdown", "lost"]
"""Why a run was cancelled.

``timeout``: the execution timeout fired (R-7); ``cancelled``: a user cancelled the job
(R-8); ``shutdown``: the worker is shutting down (R-12); ``lost``: the coordinator no
longer recognises the attempt (R-10).
"""

CAUSE_TIMEOUT: Final = "timeout"
CAUSE_CANCELLED: Final = "cancelled"
CAUSE_SHUTDOWN: Final = "shutdown"
CAUSE_LOST: Final = "lost"


class JobContext:
    """One run of a handler: identity, budget, parents' outputs and cancellation.

    The worker (or ``worker_sdk.testing``) builds it; handlers and middleware read it.
    ``cancelled`` and ``cancel_cause`` may be read from any thread, so sync handlers
    running on the worker's thread pool can poll them.
    """

    def __init__(
        self,
        *,
        job_id: str,
        attempt_id: str,
        wire_name: str,
        queue: str,
        execution_number: int,
        max_executions: int,
        generation: int,
        parent_outputs: Mapping[str, bytes] | None = None,
    ) -> None:
        self._job_id = job_id
        self._attempt_id = attempt_id
        self._wire_name = wire_name
        self._queue = queue
        self._execution_number = execution_number
        self._max_executions = max_executions
        self._generation = generation
        self._parent_outputs: Mapping[str, bytes] = MappingProxyType(dict(parent_outputs or {}))
        self._cause: CancelCause | None = None
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._progress: ProgressReport | None = None
        self._cancel_waits = 0
        """``wait_cancelled`` calls pending: the test coordinator's sign that the handler
        waits on something only time or a cancel ends (``worker_sdk.testing``)."""

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self._job_id!r}, attempt_id={self._attempt_id!r}, "
            f"wire_name={self._wire_name!r}, execution={self._execution_number}/{self._max_executions}, "
            f"cancel_cause={self._cause!r})"
        )

    @property
    def job_id(self) -> str:
        """The job's ID (UUIDv7 text)."""
        return self._job_id

    @property
    def attempt_id(self) -> str:
        """This claim's attempt ID; every write about the run names it (R-11)."""
        return self._attempt_id

    @property
    def wire_name(self) -> str:
        """The job type's wire name."""
        return self._wire_name

    @property
    def queue(self) -> str:
        """The queue the job was claimed from."""
        return self._queue

    @property
    def execution_number(self) -> int:
        """Which execution this run is, starting at 1 (R-1)."""
        return self._execution_number

    @property
    def max_executions(self) -> int:
        """The job's execution budget; ``execution_number == max_executions`` is the last try."""
        return self._max_executions

    @property
    def generation(self) -> int:
        """The job's generation; a manual retry starts a new one (R-9)."""
        return self._generation

    @property
    def parent_outputs(self) -> Mapping[str, bytes]:
        """The outputs of the job's parents by job ID (R-16); read-only."""
        return self._parent_outputs

    @property
    def cancelled(self) -> bool:
        """True once the run was cancelled; safe to poll from any thread."""
        return self._flag.is_set()

    @property
    def cancel_cause(self) -> CancelCause | None:
        """Why the run was cancelled, or None while it was not."""
        return self._cause

    async def wait_cancelled(self) -> None:
        """Returns once the run is cancelled (at once if it already is)."""
        self._cancel_waits += 1
        try:
            await self._cancelled_future()
        finally:
            self._cancel_waits -= 1

    def _cancelled_future(self) -> asyncio.Future[None]:
        """A future of the running loop that is done once the run is cancelled (done
        already if it is). For the pipeline, which waits on it beside the handler's
        task without a task of its own for ``wait_cancelled``."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._flag.is_set():
                waiter.set_result(None)
            else:
                self._waiters.append((loop, waiter))
        return waiter

    def report_progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Reports how far the run has come: ``done`` of ``total`` (None: unknown), in
        any unit, with an optional status line of at most 256 characters.

        Cheap, and safe from any thread: the worker keeps only the latest report and
        sends it with its next heartbeat if it changed, so call it as often as you
        like. Shown by ``GetJob``, ``runwick jobs get`` and the dashboard's job page.

        Raises:
            ValueError: ``done`` or ``total`` is not an int or float, negative, NaN or
                infinite, or ``message`` is not a str or is too long. Nothing is sent.
        """
        self._progress = checked_report(done, total, message)  # one reference write: atomic

    @property
    def progress(self) -> ProgressReport | None:
        """The latest report of ``report_progress``, or None before the first."""
        return self._progress

    def raise_if_cancelled(self) -> None:
        """Raises ``JobCancelled`` when the run was cancelled; otherwise does nothing."""
        cause = self._cause
        if cause is not None:
            raise JobCancelled(cause)

    def _cancel(self, cause: CancelCause) -> bool:
        """Cancels the run (for the worker and the test helper; the first cause wins).

        Returns:
            True when this call cancelled the run, False when it already was.
        """
        with self._lock:
            if self._cause is not None:
                return False
            self._cause = cause
            self._flag.set()
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_wake, waiter)
        return True


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
