"""Liveness and readiness over standard gRPC health checking (``grpc.health.v1``).

Two servicers report the same two facts:

- **liveness**: the process runs; SERVING from ``starting`` (the health port binds before
  the store opens, so a long SQLite migration does not trip a startup probe) until
  ``stop`` ends.
- **readiness**: the coordinator has started serving, the database answered the last
  background check and it is not draining.

On the API port, ``""`` and the Runwick service names follow readiness (what client-side
health checking and load balancers expect), plus ``liveness`` and ``readiness``. On the
plaintext health port, which Kubernetes' native gRPC probes call, ``""`` and
``liveness`` follow liveness and ``readiness`` follows readiness.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

log = logging.getLogger(__name__)

LIVENESS = "liveness"
READINESS = "readiness"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Health:
    """Holds the two facts and publishes them to both servicers."""

    def __init__(self, api_services: Iterable[str]) -> None:
        self.api = HealthServicer()
        """Served on the API port."""
        self.probes = HealthServicer()
        """Served on the plaintext health port."""
        self._api_ready_names = ("", *api_services, READINESS)
        self._database_ok = True
        self._draining = False
        self._live = False
        self._serving = False

    @property
    def ready(self) -> bool:
        return self._live and self._serving and self._database_ok and not self._draining

    async def starting(self) -> None:
        """Liveness SERVING, readiness NOT_SERVING: alive, not serving yet (opening and
        migrating the database)."""
        self._live = True
        await self._publish()

    async def start(self) -> None:
        """Serving: readiness follows the database checks from now on."""
        self._live = self._serving = True
        await self._publish()

    async def database_checked(self, ok: bool) -> None:
        if ok == self._database_ok:
            return
        if ok:
            log.info("database reachable again: ready")
        else:
            log.warning("database check failed: not ready")
        self._database_ok = ok
        await self._publish()

    async def draining(self) -> None:
        """Readiness turns NOT_SERVING for good; liveness stays SERVING while draining."""
        self._draining = True
        await self._publish()

    async def stop(self) -> None:
        """Everything NOT_SERVING; later changes are ignored."""
        self._live = False
        await self.api.enter_graceful_shutdown()
        await self.probes.enter_graceful_shutdown()

    async def _publish(self) -> None:
        ready = SERVING if self.ready else NOT_SERVING
        live = SERVING if self._live else NOT_SERVING
        for name in self._api_ready_names:
            await self.api.set(name, ready)
        await self.api.set(LIVENESS, live)
        for name in ("", LIVENESS):
            await self.probes.set(name, live)
        await self.probes.set(READINESS, ready)
