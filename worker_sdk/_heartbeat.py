"""Heartbeats: one message naming every attempt in flight, every interval (R-10).

Liveness comes from the stream that carries the work: when a heartbeat is still
unanswered half a lease after it was sent (at least one interval), the stream is
treated as dead and restarted (its unacknowledged results are re-sent on the next one).
Half a lease leaves time to reconnect and renew before the lease lapses, without
restarting a healthy stream whose coordinator is briefly busy.

An answer renews, in the worker's own view, the leases of the attempts the heartbeat
named and the answer did not report lost: for a lease from when the heartbeat was
sent (the coordinator renewed them later than that, so this never overestimates).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta

from worker_sdk._convert import duration
from worker_sdk._metrics import WorkerMetrics
from worker_sdk._runs import RunTable
from worker_sdk._timers import REAL_TIMERS, Timers
from worker_sdk.proto.runwick.v1 import worker_service_pb2

logger = logging.getLogger(__name__)


class Heartbeater:
    """Sends heartbeats for a RunTable and watches that they are answered."""

    def __init__(
        self,
        table: RunTable,
        *,
        interval: timedelta,
        lease: timedelta,
        send: Callable[[worker_service_pb2.ConnectRequest], bool],
        on_silence: Callable[[], None],
        metrics: WorkerMetrics | None = None,
        timers: Timers = REAL_TIMERS,
    ) -> None:
        self._table = table
        self._timers = timers
        self._metrics = metrics
        self._interval_s = interval.total_seconds()
        self._silence_limit_s = max(self._interval_s, lease.total_seconds() / 2)
        self._lease = lease
        self._lease_s = lease.total_seconds()
        self._send = send
        self._on_silence = on_silence
        self._sent_at: float | None = None
        """When (``RunTable.clock``) the heartbeat awaiting its answer was sent, if any."""
        self._sent_ids: list[str] = []
        """The attempts that heartbeat named."""

    async def run(self) -> None:
        """Beats every interval until cancelled."""
        while True:
            await self._timers.sleep(self._interval_s, "heartbeat")
            self.beat()

    def beat(self) -> None:
        """Sends one heartbeat now if anything is in flight and none awaits its answer."""
        now = self._table.clock()
        if self._sent_at is not None:
            if now - self._sent_at >= self._silence_limit_s:
                logger.warning(
                    "no heartbeat answer within %.3f s; restarting the stream to the coordinator",
                    self._silence_limit_s,
                )
                self._sent_at = None
                self._failed("unanswered")
                self._on_silence()
            return
        attempt_ids = self._table.heartbeat_ids()
        if not attempt_ids:
            return
        progress = self._table.progress_reports(attempt_ids)
        message = worker_service_pb2.ConnectRequest(
            heartbeat=worker_service_pb2.Heartbeat(
                attempt_ids=attempt_ids, lease=duration(self._lease), progress=progress
            )
        )
        if self._send(message):
            self._sent_at = now
            self._sent_ids = attempt_ids
        else:
            self._table.forget_progress_sent()
            self._failed("not_sent")

    def _failed(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.heartbeat_failures.labels(reason).inc()

    @property
    def awaiting_answer(self) -> bool:
        """True while a heartbeat sent on this stream has no answer yet."""
        return self._sent_at is not None

    def answered(self, lost_attempt_ids: Iterable[str]) -> None:
        """Records a HeartbeatAnswer: renews the leases of the attempts not reported lost."""
        if self._sent_at is not None:
            lost = set(lost_attempt_ids)
            renewed = [attempt_id for attempt_id in self._sent_ids if attempt_id not in lost]
            self._table.renew(renewed, self._sent_at + self._lease_s)
        self._sent_at = None
        self._sent_ids = []

    def reset(self) -> None:
        """Forgets the unanswered heartbeat of a stream that is gone (its progress
        reports may not have arrived: the next heartbeat sends them again)."""
        self._table.forget_progress_sent()
        self._sent_at = None
        self._sent_ids = []
