"""Lease expiry (R-4, R-5): recovers jobs whose worker stopped heartbeating. Safe with
any number of replicas (``WorkerOps.expire_leases`` takes rows with SKIP LOCKED)."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.scheduler.loop import Cadence, WritePass
from coordinator.service.batch import WorkerOps
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors


def lease_expiry(
    ops: WorkerOps, executors: Executors, on_effects: Callable[[Effects], None], cadence: Cadence
) -> WritePass:
    return WritePass(ops.expire_leases, executors, on_effects, cadence, "lease expiry")
