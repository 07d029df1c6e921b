"""Why a job waits (issue 41): the reason GetJob, ``runwick jobs get`` and the dashboard
give for an available, due job that claims are not taking now."""

from __future__ import annotations

from coordinator.domain.clock import Clock
from coordinator.domain.rates import held_by_rate
from coordinator.domain.records import JobRecord
from coordinator.domain.states import JobState
from coordinator.store import Store
from coordinator.store.claim_rates import key_of

RATE = "rate"
"""Its queue's rate (or its key's) has no room in the current window."""


def waiting_reason(store: Store, clock: Clock, job: JobRecord) -> str:
    """``RATE`` when a rate holds ``job`` back now; '' when nothing does (or it is not
    waiting to be claimed). One read of the queue's rate, only for available, due jobs."""
    now_ms = clock.now_ms()
    if job.state is not JobState.AVAILABLE or job.run_at_ms > now_ms:
        return ""
    rate, used = store.rate_state(job.queue, now_ms)
    if rate is not None and held_by_rate(rate, used, key_of(job)):
        return RATE
    return ""
