"""When the test coordinator's worker has done what it can do now.

``IdleWatch`` polls two views, cheapest first: the worker's own run table (claims
waiting for their start answer, results waiting for their acknowledgement, handlers
running) and then the coordinator's (claims of this worker not yet started, jobs of
its queues and wire names due now). Everything it reads of the coordinator is a
facade call, as a transport would make.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from worker_sdk._engine import Engine
from worker_sdk._runs import Phase
from worker_sdk._timers import TimerPurpose
from worker_sdk.testing._errors import NotIdle

try:
    from coordinator.app import Coordinator as Facade
    from coordinator.domain.demand import DemandTarget
except ImportError as missing:  # pragma: no cover - _coordinator says what is missing first
    raise ImportError(str(missing)) from missing

_POLL_S = 0.002
"""Between two looks at the worker and the store: each look is a few in-process reads."""
_MOST_LEASE_HOLDERS = 1000
_Check = Callable[[], Awaitable[str | None]]
"""A look at the worker: why it is still busy, or None when it is done."""


@dataclass(frozen=True)
class WorkerView:
    """What the test coordinator reads of its worker (one event loop: no locks)."""

    worker_id: str
    engine: Engine
    queues: tuple[str, ...]

    @property
    def wire_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.engine._handlers))

    def timer_purposes(self) -> frozenset[TimerPurpose]:
        """The timers ``advance`` stops at: heartbeats only while a run needs them."""
        if self.engine.table.heartbeat_ids():
            return frozenset({"timeout", "grace", "heartbeat"})
        return frozenset({"timeout", "grace"})

    def running(self) -> dict[str, str]:
        """Attempt ID to ``job <id> (<wire name>)`` of every handler running."""
        return {
            run.attempt_id: f"job {run.assignment.job_id} ({run.assignment.wire_name})"
            for run in self.engine.table.in_phase(Phase.RUNNING)
        }

    def waiting_for_cancel(self) -> set[str]:
        """The running handlers awaiting ``ctx.wait_cancelled()``: only a timeout (virtual
        time) or a cancel ends those."""
        return {
            run.attempt_id
            for run in self.engine.table.in_phase(Phase.RUNNING)
            if run.ctx is not None and run.ctx._cancel_waits > 0
        }

    def in_transit(self) -> str | None:
        """What is between the worker and the coordinator now, if anything."""
        table = self.engine.table
        if table.in_phase(Phase.STARTING) or table.in_phase(Phase.RELEASING):
            return "claims wait for their start answer"
        if table.unacked:
            return "results wait for their acknowledgement"
        return None

    @property
    def full(self) -> bool:
        return len(self.engine.table.runs) >= self.engine.table.capacity

    async def wait_connected(self, app: Facade, bound_s: float) -> None:
        """Waits until the coordinator holds this worker's stream with credit."""

        async def connected() -> str | None:
            for stream in app.connected_workers():
                if stream.worker_id == self.worker_id and stream.credit > 0:
                    return None
            return f"worker {self.worker_id} has not connected"

        await _poll(connected, bound_s, "the test worker to connect")


class IdleWatch:
    """Waits for the worker to settle (``advance``) or to be idle (``run_until_idle``)."""

    def __init__(
        self, app: Facade, worker: WorkerView | None, bound_s: float, first_seen: dict[str, float]
    ) -> None:
        self.app = app
        self.worker = worker
        self.bound_s = bound_s
        self.first_seen = first_seen
        """When (loop time) each running handler was first seen running, by attempt ID:
        kept by the coordinator across calls, so a handler is judged by how long it
        has run, not by when a call began."""

    async def heartbeat(self) -> None:
        """Sends the worker's heartbeat now, if runs need one, and waits for its answer,
        so that leases of live runs are renewed before lease expiry runs."""
        worker = self.worker
        if worker is None or not worker.engine.table.heartbeat_ids():
            return
        heartbeater = worker.engine.heartbeater
        heartbeater.beat()

        async def answered() -> str | None:
            return "a heartbeat waits for its answer" if heartbeater.awaiting_answer else None

        await _poll(answered, self.bound_s, "the heartbeat's answer")

    async def settle(self, *, blocked_after_s: float) -> None:
        """Waits until the worker has taken and started what is runnable now, every
        result is acknowledged, and every running handler has returned, awaits
        ``ctx.wait_cancelled()``, or has run ``blocked_after_s`` (real time): those wait
        on virtual time, or on the test."""
        worker = self.worker
        if worker is None:
            return
        loop = asyncio.get_running_loop()

        def local() -> str | None:
            now = loop.time()
            running = worker.running()
            for attempt in [a for a in self.first_seen if a not in running]:
                del self.first_seen[attempt]
            waiting = worker.waiting_for_cancel()
            fresh = [
                what
                for attempt, what in running.items()
                if now - self.first_seen.setdefault(attempt, now) < blocked_after_s and attempt not in waiting
            ]
            if fresh:
                return "handlers started at this time are running: " + ", ".join(fresh)
            return worker.in_transit()

        await _poll(lambda: self._busy(worker, local), self.bound_s, "the worker to settle")

    async def until_idle(self, bound_s: float) -> None:
        """Waits until nothing is runnable now and nothing runs (bounded: NotIdle)."""
        worker = self.worker
        if worker is None:
            return

        def local() -> str | None:
            running = worker.running()
            if running:
                return "handlers are running: " + ", ".join(running.values())
            return worker.in_transit()

        await _poll(lambda: self._busy(worker, local), bound_s, "the worker to be idle")

    async def _busy(self, worker: WorkerView, local: Callable[[], str | None]) -> str | None:
        """Why the worker is not done yet (``local``: what its table says), or None.

        The table is looked at again after the store is read: a claim the store no
        longer shows due (or reserved) has reached the table by then, and a result
        whose transaction made more work due is still unacknowledged there.
        """
        reason = local()
        if reason is not None:
            return reason
        was_full = worker.full
        if not was_full:
            due = await self._due(worker.queues, worker.wire_names)
            if due:
                return "jobs are runnable now in queue(s) " + ", ".join(due)
        for holder in await self.app.lease_holders(_MOST_LEASE_HOLDERS):
            if holder.worker_id == worker.worker_id and holder.reserved:
                return f"{holder.reserved} claim(s) not yet started"
        reason = local()
        if reason is None and was_full and not worker.full:
            return "a slot freed while the store was read"
        return reason

    async def _due(self, queues: Collection[str], wire_names: tuple[str, ...]) -> list[str]:
        due = []
        for queue in queues:
            demand = await self.app.slot_demand(DemandTarget(queue, wire_names), cap=1)
            if demand.due:
                due.append(queue)
        return due


async def _poll(busy: _Check, bound_s: float, what: str) -> None:
    """Calls ``busy`` until it answers None; NotIdle with its last answer after ``bound_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        reason = await busy()
        if reason is None:
            return
        if loop.time() >= deadline:
            raise NotIdle(f"waited {bound_s:g} s (real time) for {what}; still: {reason}")
        await asyncio.sleep(_POLL_S)
