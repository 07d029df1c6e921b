"""The e2e tests use the integration fixtures (a coordinator on port 0 per engine)."""

from tests.integration.conftest import client, coordinator, spawn_worker

__all__ = ["client", "coordinator", "spawn_worker"]
