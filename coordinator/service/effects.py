"""What a transaction changed that others must hear of once it committed: jobs that
ended (waiters, metrics, later dependents), runs that started or ended (metrics), jobs
that became claimable (the dispatcher), cancels to push to a worker's stream.

The service gathers them while it writes; the facade (``coordinator.app``) hands them
to their listeners after the commit, the same way whatever the transport. The facts
made per job are named tuples, for the reason ``service.work`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from coordinator.domain.states import JobState, Outcome


class RunStarted(NamedTuple):
    """A start granted: how long the job had been due when it started."""

    queue: str
    wire_name: str
    waited_ms: int


class AttemptEnded(NamedTuple):
    """An attempt that ended, and what became of its job."""

    queue: str
    wire_name: str
    outcome: Outcome
    job_state: JobState
    ran_ms: int | None
    """From start to the reported result; None when no run ended here (release, lapse)."""
    lease_lapsed: bool = False
    """The coordinator ended it because its lease lapsed (R-4, R-5 abandoned)."""


class JobFinished(NamedTuple):
    """A job that reached a terminal state (every way a job ends produces one)."""

    job_id: str
    queue: str
    wire_name: str
    state: JobState


@dataclass(frozen=True, slots=True)
class CancelPush:
    """A cancel to send over the streams holding the attempt (R-8): its worker ID with
    the token it claimed with. The worker ID alone is the client's to choose, so another
    tenant's stream may carry it too."""

    worker_id: str
    attempt_id: str
    token_id: str | None = None
    """The token the attempt was claimed with (None with authentication off)."""


@dataclass(slots=True)
class Effects:
    finished: list[JobFinished] = field(default_factory=list)
    terminal_job_ids: set[str] = field(default_factory=set)
    """The IDs of ``finished``, for waiters."""
    started: list[RunStarted] = field(default_factory=list)
    ended: list[AttemptEnded] = field(default_factory=list)
    available_changed: bool = False
    """Jobs became claimable now: dispatchers should claim."""
    next_run_at_ms: int | None = None
    """The earliest run-at this transaction scheduled (a retry), so the dispatcher can wake."""
    cancel_pushes: list[CancelPush] = field(default_factory=list)
    leases_taken: bool = False
    """Jobs were claimed: lease expiry has leases to watch again."""
    maintenance_left: bool | None = None
    """After a maintenance pass, whether its next pass may find something (leased jobs
    for lease expiry, scheduled jobs for due promotion): when not, it may sleep longer."""

    def stale_result_count(self) -> int:
        """Results refused as stale (R-11); only worker batches have results."""
        return 0

    def job_finished(self, job_id: str, queue: str, wire_name: str, state: JobState) -> None:
        self.finished.append(JobFinished(job_id, queue, wire_name, state))
        self.terminal_job_ids.add(job_id)

    def scheduled(self, run_at_ms: int) -> None:
        current = self.next_run_at_ms
        self.next_run_at_ms = run_at_ms if current is None else min(current, run_at_ms)
