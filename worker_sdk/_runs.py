"""Run tracking: the worker's claims in flight, results awaiting their ack, and credit.

Slot accounting is one invariant instead of scattered counters: a slot is used by every
claim in flight and every result not yet acknowledged; credit the coordinator holds
counts as promised. Whatever is left is sent as Credit (R-10, worker protocol).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from worker_sdk._context import JobContext
from worker_sdk._progress import ProgressReport
from worker_sdk.proto.runwick.v1 import job_pb2, worker_service_pb2


class Phase(enum.Enum):
    """Where a claim is between Assignment and Result."""

    STARTING = "starting"
    """StartRequest sent; no answer yet (the job is ``reserved``)."""
    RUNNING = "running"
    """Start granted; the pipeline runs."""
    RELEASING = "releasing"
    """Given back with Release while draining; waiting for the start answer, if any."""


@dataclass(eq=False)
class Run:
    """One claim in flight."""

    assignment: worker_service_pb2.Assignment
    lease_deadline: float
    """When the claim's lease lapses by the worker's own view (``RunTable.clock``): the
    lease measured from the assignment's arrival, renewed by answered heartbeats. Not
    the coordinator's ``lease_expires_at``: that is on the coordinator's wall clock."""
    phase: Phase = Phase.STARTING
    ctx: JobContext | None = None
    task: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    """A user cancel arrived before the start answer."""
    lost: bool = False
    """The coordinator no longer recognises the attempt: no heartbeat, no result."""
    progress_sent: ProgressReport | None = None
    """The handler's progress report last sent on a heartbeat (``JobContext.progress``):
    a heartbeat carries the report again only once it changed."""

    @property
    def attempt_id(self) -> str:
        """The claim's attempt ID."""
        return self.assignment.attempt_id


class RunTable:
    """Claims in flight, unacknowledged results and credit of one worker."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.runs: dict[str, Run] = {}
        self.unacked: dict[str, worker_service_pb2.ConnectRequest] = {}
        """Result messages sent but not yet acknowledged, by attempt ID, in send order."""
        self.credit_outstanding = 0
        """Credit the coordinator holds on the current stream (not yet used by assignments)."""
        self.clock: Callable[[], float] = time.monotonic
        """The monotonic clock leases and heartbeat silence are judged by (seconds)."""
        self._changed = asyncio.Event()

    def known(self, attempt_id: str) -> bool:
        """True when the attempt is in flight or has a result awaiting its ack."""
        return attempt_id in self.runs or attempt_id in self.unacked

    def credit_to_send(self) -> int:
        """How much more credit the free slots allow.

        A run's slot is free once its result is sent, not acknowledged: the credit then
        travels with the result, and the coordinator claims the next job in the result's
        own transaction instead of one transaction later. Results awaiting their ack hold
        slots only beyond ``capacity`` of them, so a coordinator that stops acknowledging
        stops getting work for this worker before the unacknowledged outputs pile up.
        """
        awaiting_beyond_capacity = max(0, len(self.unacked) - self.capacity)
        used = len(self.runs) + self.credit_outstanding + awaiting_beyond_capacity
        return max(0, self.capacity - used)

    def heartbeat_ids(self) -> list[str]:
        """Attempts to renew: reserved and running, except lost ones (R-10)."""
        return [
            attempt_id
            for attempt_id, run in self.runs.items()
            if not run.lost and run.phase is not Phase.RELEASING
        ]

    def progress_reports(self, attempt_ids: Iterable[str]) -> list[worker_service_pb2.ProgressReport]:
        """The progress of those runs whose handler reported anew since the last
        heartbeat; marked sent (``forget_progress_sent`` undoes that for a lost stream)."""
        reports = []
        for attempt_id in attempt_ids:
            run = self.runs[attempt_id]
            latest = run.ctx.progress if run.ctx is not None else None
            if latest is None or latest is run.progress_sent:
                continue
            run.progress_sent = latest
            progress = job_pb2.Progress(done=latest.done, total=latest.total, message=latest.message)
            reports.append(worker_service_pb2.ProgressReport(attempt_id=attempt_id, progress=progress))
        return reports

    def forget_progress_sent(self) -> None:
        """The stream that carried the reports is gone: send each run's latest again."""
        for run in self.runs.values():
            run.progress_sent = None

    def renew(self, attempt_ids: Iterable[str], lease_deadline: float) -> None:
        """Extends the leases of those attempts still in flight to ``lease_deadline``."""
        for attempt_id in attempt_ids:
            run = self.runs.get(attempt_id)
            if run is not None and run.lease_deadline < lease_deadline:
                run.lease_deadline = lease_deadline

    def in_phase(self, phase: Phase) -> list[Run]:
        """The runs in ``phase``, oldest first."""
        return [run for run in self.runs.values() if run.phase is phase]

    def notify(self) -> None:
        """Wakes every ``wait_until`` so it re-checks its condition."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Waits until ``condition()`` holds (re-checked on every change) or the timeout.

        Returns:
            Whether the condition holds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return condition()
        return True
