"""Worker sessions: one per connected stream, holding what the dispatcher delivers
(``coordinator.dispatch.deliveries``) until the transport sends it.

A session's outbox holds domain deliveries, never protobuf: the transport
(``coordinator.api.protocol``) decides how they are framed on the wire, for example how
many assignments ride in one message.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.dispatch.deliveries import (
    Assignments,
    Delivery,
)
from coordinator.domain.records import WorkerIdentity
from coordinator.service.work import NO_PROGRESS, Claimed, ResultAnswer, ResultReport

_session_numbers = itertools.count(1)


class SessionHost(Protocol):
    """What a session hands its worker's messages to (the ``Dispatcher``)."""

    def add_credit(self, session: WorkerSession, count: int) -> None: ...
    def start(self, session: WorkerSession, attempt_id: str) -> None: ...
    def heartbeat(
        self,
        session: WorkerSession,
        attempt_ids: Sequence[str],
        lease_ms: int,
        progress: Mapping[str, str] = NO_PROGRESS,
    ) -> None: ...
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
    """Credit a claim out now asked for (a worker batch's or an enqueue's), until it is
    answered. This and the three fields around it change only in ``dispatch.claims``."""
    claim_may_be_stale: bool = False
    """Work became claimable while this session's credit was out in a claim, which may
    have read before that work committed: once the credit is back, it claims again."""
    drained: bool = False
    """Its last claim found its queues empty (``BatchAnswers.drained``) and no work was
    heard of since: credit coming back alone (a run ended) does not make it claim again.
    Any news of work clears it (``dispatch.claims.hear_of_work``)."""
    ran_dry: bool = False
    """Its last claim answered took fewer jobs than it could (its queues ran out: a light
    load). Only such a session's claims outside an enqueue's batch keep a credit back
    (``dispatch.claims.claim_count``)."""
    draining: bool = False
    number: int = field(default_factory=lambda: next(_session_numbers))
    outbox: asyncio.Queue[Delivery | None] = field(default_factory=asyncio.Queue)
    budget: int = 0
    """Most items (starts, results, releases, heartbeats) the stream may have taken in
    and not yet had answered (``StreamBounds.stream_budget``); 0: unbounded."""
    taken: int = 0
    """Items taken in and not yet answered (answers count until the stream sends them)."""
    held: set[str] = field(default_factory=set)
    """Attempts this stream holds, as far as it knows: claimed for it, or renewed by one
    of its heartbeats. A heartbeat's other IDs cost a store look-up only while
    ``unheld_checks_left`` lasts; after that they are answered lost at once."""
    unheld_checks_left: int = 0
    progress_written: dict[str, str] = field(default_factory=dict)
    """The progress report last stored for each attempt it holds (stored form): a
    heartbeat repeating it writes nothing. Only attempts its last heartbeat renewed."""
    _room: asyncio.Event | None = field(default=None, repr=False)
    host: str = ""
    """What the Hello said of the worker (the dashboard shows them)."""
    sdk: str = ""
    last_heartbeat_ms: int | None = None
    """When the transport last handed on a heartbeat of this stream (None: none yet)."""

    @property
    def full(self) -> bool:
        return 0 < self.budget <= self.taken

    def take(self, count: int = 1) -> None:
        self.taken += count

    def give_back(self, count: int = 1) -> None:
        """``count`` items were answered (or need no answer any more)."""
        self.taken -= count
        if self._room is not None and not self.full:
            self._room.set()

    def make_room(self) -> None:
        """Wakes the reader waiting in ``wait_for_room`` to look again."""
        if self._room is not None:
            self._room.set()

    async def wait_for_room(self, batch_full: Callable[[], bool]) -> None:
        """Returns once the stream's budget has room and ``batch_full()`` is false. Its
        reader reads nothing meanwhile: gRPC flow control then stops the client."""
        while self.full or batch_full():
            self._room = asyncio.Event()
            await self._room.wait()
        self._room = None

    def assign(self, claimed: tuple[Claimed, ...]) -> None:
        self.held.update(c.attempt_id for c in claimed)
        self.outbox.put_nowait(Assignments(claimed))

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

    # -- messages from the worker (each counts in ``taken`` until answered) --------

    def add_credit(self, count: int) -> None:
        self.dispatcher.add_credit(self, count)

    def start(self, attempt_id: str) -> None:
        self.taken += 1
        self.dispatcher.start(self, attempt_id)

    def heartbeat(
        self, attempt_ids: Sequence[str], lease_ms: int, progress: Mapping[str, str] = NO_PROGRESS
    ) -> None:
        self.taken += 1
        self.dispatcher.heartbeat(self, attempt_ids, lease_ms, progress)

    def result(self, report: ResultReport) -> None:
        self.taken += 1
        self.dispatcher.result(self, report)

    def reject_result(self, answer: ResultAnswer) -> None:
        """A malformed result, answered here: it still counts until its answer is sent."""
        self.taken += 1
        self.outbox.put_nowait(answer)

    def release(self, attempt_id: str) -> None:
        self.taken += 1
        self.held.discard(attempt_id)
        self.dispatcher.release(self, attempt_id)

    def retire(self) -> None:
        """The stream reached its maximum age: end it cleanly (see ``Dispatcher.retire``)."""
        self.dispatcher.retire(self)
