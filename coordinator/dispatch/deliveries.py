"""What the dispatcher delivers to a worker session, and a worker's checked Hello: plain
values the transport (``coordinator.api``) reads and frames, apart from the session
class that carries them so the transport can import them without the dispatcher's
machinery (the import contracts in pyproject.toml name this module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from coordinator.service.work import Claimed, HeartbeatAnswer, ResultAnswer, StartAnswer


@dataclass(frozen=True, slots=True)
class Assignments:
    """Jobs claimed for the session in one batch."""

    claimed: tuple[Claimed, ...]


@dataclass(frozen=True, slots=True)
class CancelNotice:
    """R-8: the worker should cancel the handler's run of the attempt."""

    attempt_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class DrainNotice:
    """The coordinator is stopping: finish within ``timeout_s`` and go."""

    timeout_s: float


Delivery: TypeAlias = StartAnswer | HeartbeatAnswer | ResultAnswer | Assignments | CancelNotice | DrainNotice


@dataclass(frozen=True, slots=True)
class WorkerHello:
    """A worker's Hello, checked."""

    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    capacity: int
    lease_ms: int
    token_id: str | None = None
    """The token the stream was opened with (None with auth off)."""
    token_queues: frozenset[str] | None = None
    """That token's queue restriction (None: any queue)."""
    host: str = ""
    """The host the worker says it runs on ('' when it did not say)."""
    sdk: str = ""
    """The SDK and version it says it runs (``runwick-python/0.1.0``; '' when not said)."""
