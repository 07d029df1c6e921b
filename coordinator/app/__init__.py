"""The facade: one object that owns the store, executors, dispatcher, services and
background loops, and exposes every operation with its follow-ups. Transports (the gRPC
API, the CLI's in-process commands, the dashboard) call only it."""

from coordinator.app.facade import Coordinator
from coordinator.app.offline import (
    MigrationLocked,
    SchemaNotCurrent,
    database_failure,
    migrate_database,
    open_scratch_store,
)
from coordinator.app.startup import DatabaseKeptFailing
from coordinator.app.workers import ConnectedWorker

# The handle ``Coordinator.connect_worker`` gives a worker stream's transport: exported
# here so the API names it through the facade, not the dispatcher.
from coordinator.dispatch.sessions import WorkerSession
from coordinator.service.bulk import BulkOutcome, JobFilter, SkippedJob

__all__ = [
    "BulkOutcome",
    "ConnectedWorker",
    "Coordinator",
    "DatabaseKeptFailing",
    "JobFilter",
    "MigrationLocked",
    "SchemaNotCurrent",
    "SkippedJob",
    "WorkerSession",
    "database_failure",
    "migrate_database",
    "open_scratch_store",
]
