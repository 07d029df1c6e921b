"""The facade's calls on worker streams: connect, disconnect, and what is connected."""

from __future__ import annotations

from coordinator.app.core import CoordinatorCore
from coordinator.app.workers import ConnectedWorker
from coordinator.dispatch import WorkerHello, WorkerSession
from coordinator.domain.records import WorkerStream
from coordinator.errors import Unavailable


class WorkerCalls(CoordinatorCore):
    """Worker streams on this replica."""

    def connected_workers(self) -> list[WorkerStream]:
        """The worker streams open on this coordinator (other replicas have their own)."""
        return sorted(
            (
                WorkerStream(
                    worker_id=s.worker_id,
                    queues=s.queues,
                    wire_names=s.wire_names,
                    capacity=s.capacity,
                    credit=s.credit,
                    lease_ms=s.lease_ms,
                    token_id=s.token_id,
                    draining=s.draining,
                    host=s.host,
                    sdk=s.sdk,
                    connected_at_ms=self._connected_at_ms.get(s),
                    last_heartbeat_ms=s.last_heartbeat_ms,
                )
                for s in self.dispatcher.sessions
            ),
            key=lambda w: (w.worker_id, w.queues),
        )

    def check_accepting_workers(self) -> None:
        """Raises Unavailable while shutting down: the worker should go to another
        replica (or to our successor)."""
        if self.dispatcher.draining:
            raise Unavailable("coordinator is shutting down; connect again", reason="SHUTTING_DOWN")

    def connect_worker(self, hello: WorkerHello) -> WorkerSession:
        """Opens a session for a worker stream; raises Unavailable while shutting down."""
        self.check_accepting_workers()
        session = self.dispatcher.open(hello)
        self._connected_at_ms[session] = self.clock.now_ms()
        return session

    def disconnect_worker(self, session: WorkerSession) -> None:
        self._connected_at_ms.pop(session, None)
        self.dispatcher.close(session)

    async def list_workers(self) -> list[ConnectedWorker]:
        """The worker streams open on this replica, oldest first, each with how many of
        its jobs are reserved or running (read from the store, so a worker's claims
        count wherever it is connected). Other replicas' streams are not known here."""
        sessions = sorted(self.dispatcher.sessions, key=lambda s: s.number)
        in_flight = await self.executors.read(self.store.in_flight_by_worker, [s.worker_id for s in sessions])
        return [
            ConnectedWorker(
                worker_id=s.worker_id,
                queues=s.queues,
                wire_names=s.wire_names,
                capacity=s.capacity,
                in_flight=in_flight.get(s.worker_id, 0),
                credit=s.credit,
                connected_at_ms=self._connected_at_ms.get(s, 0),
                token_id=s.token_id,
                host=s.host,
                sdk=s.sdk,
            )
            for s in sessions
        ]
