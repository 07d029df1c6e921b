"""Rows of the jobs table for the benchmarks that fill a scratch database directly
(bulk inserts, no enqueue path): one job's columns with the enqueue defaults."""

from __future__ import annotations

import random
from typing import Any

from coordinator.domain.ids import uuid7
from coordinator.domain.states import JobState


def job_row(rng: random.Random, now: int, queue: str, state: JobState, **columns: Any) -> dict[str, Any]:
    """A no-op job of ``queue`` in ``state``, due within the last hour; ``columns`` add or
    replace columns (a concurrency key, a worker)."""
    return {
        "id": uuid7(now),
        "wire_name": "bench.noop",
        "queue": queue,
        "state": state.value,
        "priority": 0,
        "run_at_ms": now - rng.randrange(3_600_000),
        "payload": b"{}",
        "payload_version": 1,
        "max_executions": 3,
        "retry_initial_delay_ms": 5_000,
        "retry_max_delay_ms": 60_000,
        "max_unstarted_abandonments": 5,
        "unstarted_initial_delay_ms": 1_000,
        "unstarted_max_delay_ms": 30_000,
        "generation": 1,
        "executions": 0,
        "unstarted_streak": 0,
        "created_at_ms": now,
        "updated_at_ms": now,
        "finished_at_ms": now if state.terminal else None,
        "history_seq": 1,
        "cancel_requested": False,
        **columns,
    }
