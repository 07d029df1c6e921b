"""Lease expiry (R-4, R-5): recovers jobs whose worker stopped heartbeating. Safe with
any number of replicas: rows are taken with SKIP LOCKED and every write is conditional."""

from __future__ import annotations

import functools
from collections.abc import Callable

from coordinator.domain.lifecycle import decide_lease_expiry
from coordinator.scheduler.loop import Cadence, WritePass
from coordinator.service.batch import WorkerOps
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors
from coordinator.service.work import BatchAnswers
from coordinator.service.writes import JobWrites
from coordinator.store import Tx


def expire_leases(ops: WorkerOps) -> BatchAnswers:
    """One pass: ends the attempts of up to ``maintenance_batch`` lapsed leases in one
    transaction, with the store, clock and random source the worker batches use."""

    def expire(tx: Tx) -> BatchAnswers:
        # Read on each try (a try run again takes a fresh time). The lapsed rows are
        # taken with SKIP LOCKED, so nothing waits between this reading and the rows it
        # compares and stamps: the lapse is decided and stamped at the same time.
        now = ops.clock.now_ms()
        answers = BatchAnswers()
        writes = JobWrites(tx, now, answers)
        expired = tx.expired_leases(now, ops.config.maintenance_batch)
        for job in expired:
            decision = decide_lease_expiry(job, now, ops.rng)
            writes.end_attempt(job, decision, reported=False, lease_lapsed=True)
        writes.flush()
        answers.maintenance_left = bool(expired) or tx.any_leased()
        return answers

    return ops.store.transact(expire, what="lease expiry")


def lease_expiry(
    ops: WorkerOps, executors: Executors, on_effects: Callable[[Effects], None], cadence: Cadence
) -> WritePass:
    return WritePass(functools.partial(expire_leases, ops), executors, on_effects, cadence, "lease expiry")
