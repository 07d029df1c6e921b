"""The worker's tunables, checked once when the ``Worker`` is built."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a Worker needs to know besides its handlers and middleware."""

    worker_id: str
    """Unique per worker process; stays the same across reconnects."""
    queues: tuple[str, ...]
    """Queues to take jobs from."""
    concurrency: int
    """Runs at once; also the sync handlers' thread-pool size and the Hello capacity."""
    lease: timedelta
    """Lease asked for on every claim and heartbeat (R-10)."""
    heartbeat_interval: timedelta
    """Time between heartbeats (R-10)."""
    drain_timeout: timedelta
    """How long running handlers may finish when draining before they are interrupted (R-12)."""
    cancellation_grace: timedelta
    """How long a cancelled handler may take to return (R-7)."""
    max_output_bytes: int
    """Largest handler output; more is reported as ``output_too_large``."""
    reconnect_initial_delay: timedelta
    """First reconnect delay; it doubles (with jitter) up to ``reconnect_max_delay``."""
    reconnect_max_delay: timedelta
    """Cap of the reconnect delay."""
    hello_timeout: timedelta
    """How long to wait for Welcome after Hello before reconnecting."""
    ack_timeout: timedelta
    """How long a drain waits for the last results to be acknowledged."""


def default_worker_id() -> str:
    """``hostname-pid-random``: unique per process, readable in the dashboard."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def build_config(
    *,
    worker_id: str | None,
    queues: Sequence[str],
    concurrency: int,
    lease: timedelta,
    heartbeat_interval: timedelta | None,
    drain_timeout: timedelta,
    cancellation_grace: timedelta,
    max_output_bytes: int,
    reconnect_initial_delay: timedelta,
    reconnect_max_delay: timedelta,
    hello_timeout: timedelta,
    ack_timeout: timedelta,
) -> WorkerConfig:
    """Checks the Worker arguments and returns them as a config; raises ValueError."""
    if isinstance(queues, str):
        raise ValueError("queues must be a sequence of queue names, not one str")
    queue_names = tuple(queues)
    if not queue_names or not all(isinstance(q, str) and q for q in queue_names):
        raise ValueError("queues must hold at least one non-empty queue name")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    if isinstance(max_output_bytes, bool) or not isinstance(max_output_bytes, int) or max_output_bytes < 0:
        raise ValueError(f"max_output_bytes must be an int >= 0, got {max_output_bytes!r}")
    _positive("lease", lease)
    if lease % _ONE_MS:
        raise ValueError(f"lease must be a whole number of milliseconds, got {lease}")
    interval = heartbeat_interval if heartbeat_interval is not None else lease / 3
    _positive("heartbeat_interval", interval)
    if interval >= lease:
        raise ValueError(f"heartbeat_interval ({interval}) must be shorter than the lease ({lease})")
    for name, value in (
        ("drain_timeout", drain_timeout),
        ("cancellation_grace", cancellation_grace),
        ("ack_timeout", ack_timeout),
    ):
        if not isinstance(value, timedelta) or value < timedelta(0):
            raise ValueError(f"{name} must be a non-negative timedelta, got {value!r}")
    _positive("reconnect_initial_delay", reconnect_initial_delay)
    _positive("reconnect_max_delay", reconnect_max_delay)
    _positive("hello_timeout", hello_timeout)
    if reconnect_initial_delay > reconnect_max_delay:
        raise ValueError("reconnect_initial_delay must not exceed reconnect_max_delay")
    if worker_id is not None and (not isinstance(worker_id, str) or not worker_id):
        raise ValueError("worker_id must be a non-empty str")
    return WorkerConfig(
        worker_id=worker_id or default_worker_id(),
        queues=queue_names,
        concurrency=concurrency,
        lease=lease,
        heartbeat_interval=interval,
        drain_timeout=drain_timeout,
        cancellation_grace=cancellation_grace,
        max_output_bytes=max_output_bytes,
        reconnect_initial_delay=reconnect_initial_delay,
        reconnect_max_delay=reconnect_max_delay,
        hello_timeout=hello_timeout,
        ack_timeout=ack_timeout,
    )


def _positive(name: str, value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{name} must be a positive timedelta, got {value!r}")
