"""Runwick's worker SDK: declare job types, enqueue and read jobs, run handlers.

- ``@job(...)`` declares a dataclass as a job type.
- ``Client`` / ``AsyncClient`` enqueue jobs and read them back, cancel and retry them
  (one by one, or in bulk by filter: ``BulkResult``), list the connected workers
  (``WorkerListing``),
  manage recurring schedules (``ScheduleInfo``, ``CatchUp``), and administer API tokens
  and the audit log.
- ``ConnectionOptions`` says how to reach the coordinator (target, token, TLS); the
  clients and the worker take its fields as arguments, or one ready-made.
- ``Worker`` runs handlers for jobs the coordinator pushes over one gRPC stream, in the
  host's event loop, standalone, or on a thread of its own (``BackgroundWorker``).
- ``worker_sdk.testing`` runs a handler through the same pipeline without a coordinator,
  or whole job lifecycles against a real coordinator on a virtual clock (``Coordinator``).
- ``configure_logging`` sets up a standalone worker process's logs (text or JSON lines).
"""

from worker_sdk._async_client import AsyncClient
from worker_sdk._background import BackgroundWorker
from worker_sdk._bulk import BulkResult, SkippedJob, WorkerInfo, WorkerListing
from worker_sdk._client import Client
from worker_sdk._client_base import EnqueueItem, new_job_id
from worker_sdk._connection import ConnectionOptions
from worker_sdk._context import CancelCause, JobContext
from worker_sdk._errors import (
    AlreadyExists,
    ArgumentError,
    CoordinatorError,
    CoordinatorUnavailable,
    FailedPrecondition,
    FieldViolation,
    JobCancelled,
    JobNotFound,
    MessageTooLarge,
    PayloadTooLarge,
    PermanentJobFailure,
    PermissionDenied,
    QueueLimitReached,
    RunwickError,
    Unauthenticated,
)
from worker_sdk._info import (
    AttemptInfo,
    AuditEvent,
    CreatedToken,
    EnqueuedJob,
    JobInfo,
    JobState,
    RevealedError,
    TokenInfo,
)
from worker_sdk._jobs import Upgrader, job
from worker_sdk._logging import configure_logging
from worker_sdk._metrics_http import MetricsHttpLimits
from worker_sdk._middleware import CallNext, Middleware
from worker_sdk._progress import ProgressReport
from worker_sdk._queues import QueueInfo, QueueRateInfo
from worker_sdk._results import Failed, JobResult, Outcome, Retry, Success
from worker_sdk._schedules import CatchUp, ScheduleInfo
from worker_sdk._settings import JobConfig, JobSettings
from worker_sdk._worker import Worker

__all__ = [
    "AlreadyExists",
    "ArgumentError",
    "AsyncClient",
    "AttemptInfo",
    "AuditEvent",
    "BackgroundWorker",
    "BulkResult",
    "CallNext",
    "CancelCause",
    "CatchUp",
    "Client",
    "ConnectionOptions",
    "CoordinatorError",
    "CoordinatorUnavailable",
    "CreatedToken",
    "EnqueueItem",
    "EnqueuedJob",
    "Failed",
    "FailedPrecondition",
    "FieldViolation",
    "JobCancelled",
    "JobConfig",
    "JobContext",
    "JobInfo",
    "JobNotFound",
    "JobResult",
    "JobSettings",
    "JobState",
    "MessageTooLarge",
    "MetricsHttpLimits",
    "Middleware",
    "Outcome",
    "PayloadTooLarge",
    "PermanentJobFailure",
    "PermissionDenied",
    "ProgressReport",
    "QueueInfo",
    "QueueLimitReached",
    "QueueRateInfo",
    "Retry",
    "RevealedError",
    "RunwickError",
    "ScheduleInfo",
    "SkippedJob",
    "Success",
    "TokenInfo",
    "Unauthenticated",
    "Upgrader",
    "Worker",
    "WorkerInfo",
    "WorkerListing",
    "configure_logging",
    "job",
    "new_job_id",
]
