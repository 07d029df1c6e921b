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

Each port serves at most ``max_watches`` Watch streams at once: health is open to
callers without a token, and each stream holds memory for as long as its caller likes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

log = logging.getLogger(__name__)

LIVENESS = "liveness"
READINESS = "readiness"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class BoundedHealthServicer(HealthServicer):
    """grpc_health's servicer, refusing a Watch past ``max_watches`` open ones with
    RESOURCE_EXHAUSTED."""

    def __init__(self, max_watches: int) -> None:
        super().__init__()
        self.max_watches = max_watches
        self.watches = 0
        """Watch streams open now."""

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        if self.watches >= self.max_watches:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.watches} health watches are open, the most this port serves "
                "(max_health_watches); use Check, or try again later",
            )
        self.watches += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watches -= 1


class Health:
    """Holds the two facts and publishes them to both servicers."""

    def __init__(self, api_services: Iterable[str], max_watches: int) -> None:
        self.api = BoundedHealthServicer(max_watches)
        """Served on the API port."""
        self.probes = BoundedHealthServicer(max_watches)
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
