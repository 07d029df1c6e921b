"""Runwick's worker SDK: declare job types, enqueue and read jobs, run handlers.

- ``@job(...)`` declares a dataclass as a job type.
- ``Client`` / ``AsyncClient`` enqueue jobs and read them back.
- ``Worker`` runs handlers for jobs the coordinator pushes over one gRPC stream.
- ``worker_sdk.testing`` runs a handler through the same pipeline without a coordinator.
"""

from worker_sdk._client import AsyncClient, Client
from worker_sdk._client_base import EnqueueItem
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
    RunwickError,
    Unauthenticated,
)
from worker_sdk._info import AttemptInfo, JobInfo, JobState, RevealedError
from worker_sdk._jobs import Upgrader, job
from worker_sdk._middleware import CallNext, Middleware
from worker_sdk._results import Failed, JobResult, Outcome, Retry, Success
from worker_sdk._settings import JobConfig, JobSettings
from worker_sdk._worker import Worker

__all__ = [
    "AlreadyExists",
    "ArgumentError",
    "AsyncClient",
    "AttemptInfo",
    "CallNext",
    "CancelCause",
    "Client",
    "CoordinatorError",
    "CoordinatorUnavailable",
    "EnqueueItem",
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
    "Middleware",
    "Outcome",
    "PayloadTooLarge",
    "PermanentJobFailure",
    "PermissionDenied",
    "Retry",
    "RevealedError",
    "RunwickError",
    "Success",
    "Unauthenticated",
    "Upgrader",
    "Worker",
    "job",
]
