"""Worker sessions and what the dispatcher delivers to them.

A session's outbox holds domain deliveries, never protobuf: the transport
(``coordinator.api.protocol``) decides how they are framed on the wire, for example how
many assignments ride in one message.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from coordinator.domain.records import WorkerIdentity
from coordinator.service.work import Claimed, HeartbeatAnswer, ResultAnswer, ResultReport, StartAnswer

_session_numbers = itertools.count(1)


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


class SessionHost(Protocol):
    """What a session hands its worker's messages to (the ``Dispatcher``)."""

    def add_credit(self, session: WorkerSession, count: int) -> None: ...
    def start(self, session: WorkerSession, attempt_id: str) -> None: ...
    def heartbeat(self, session: WorkerSession, attempt_ids: list[str], lease_ms: int) -> None: ...
    def result(self, session: WorkerSession, report: ResultReport) -> None: ...
    def release(self, session: WorkerSession, attempt_id: str) -> None: ...
    def retire(self, session: WorkerSession) -> None: ...


@dataclass(eq=False)
class WorkerSession:
    """One connected worker stream. The transport calls its methods for each message
    and reads ``outbox`` (a ``None`` ends the stream)."""

    dispatcher: SessionHost = field(repr=False)
    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    capacity: int
    lease_ms: int
    token_id: str | None = None
    token_queues: frozenset[str] | None = None
    credit: int = 0
    reserved: int = 0
    """Credit an enqueue's transaction is claiming for right now (``Dispatcher.reserve_claims``)."""
    claim_may_be_stale: bool = False
    """Work became claimable while this session's credit was out in a claim, which may
    have read before that work committed: once the credit is back, it claims again."""
    drained: bool = False
    """Its last claim found its queues empty (``BatchAnswers.drained``) and no work was
    heard of since: credit coming back alone (a run ended) does not make it claim again.
    Any news of work clears it (``Dispatcher``)."""
    draining: bool = False
    number: int = field(default_factory=lambda: next(_session_numbers))
    outbox: asyncio.Queue[Delivery | None] = field(default_factory=asyncio.Queue)

    @functools.cached_property
    def identity(self) -> WorkerIdentity:
        """Who this stream's messages come from: only it may act on the attempts it claims.
        (Its worker ID and token are fixed for the stream's life: made once.)"""
        return WorkerIdentity(self.worker_id, self.token_id, self.token_queues)

    def deliver(self, delivery: Delivery) -> None:
        self.outbox.put_nowait(delivery)

    def close(self) -> None:
        """Ends the session's outgoing stream (a ``None`` in the outbox)."""
        self.outbox.put_nowait(None)

    # -- messages from the worker ------------------------------------------------------

    def add_credit(self, count: int) -> None:
        self.dispatcher.add_credit(self, count)

    def start(self, attempt_id: str) -> None:
        self.dispatcher.start(self, attempt_id)

    def heartbeat(self, attempt_ids: list[str], lease_ms: int) -> None:
        self.dispatcher.heartbeat(self, attempt_ids, lease_ms)

    def result(self, report: ResultReport) -> None:
        self.dispatcher.result(self, report)

    def release(self, attempt_id: str) -> None:
        self.dispatcher.release(self, attempt_id)

    def retire(self) -> None:
        """The stream reached its maximum age: end it cleanly (see ``Dispatcher.retire``)."""
        self.dispatcher.retire(self)
