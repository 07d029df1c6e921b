"""Bulk cancel and retry by filter, and the connected workers, for ``AsyncClient`` and
``Client`` (``AdminService.BulkCancelJobs``, ``BulkRetryJobs``, ``ListWorkers``).

A bulk call is one RPC: the coordinator selects the jobs (those that existed when the
call began) and acts on them in bounded batches, each job audited as a single cancel or
retry is. Bulk calls need the ``manage`` scope, ``list_workers`` needs ``read``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker_sdk._client_base import ClientBase
from worker_sdk._convert import optional_datetime, state_to_proto
from worker_sdk._errors import ArgumentError, translated_rpc_errors
from worker_sdk._info import JobState
from worker_sdk.proto.runwick.v1 import admin_service_pb2


@dataclass(frozen=True, slots=True)
class SkippedJob:
    """A job a bulk call selected and left as it was."""

    job_id: str
    reason: str
    """What a single call would have been refused with, e.g. ``PARENT_NOT_SUCCEEDED``."""
    message: str


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk cancel or retry did."""

    done: int
    """Cancelled at once (``bulk_cancel``) or retried (``bulk_retry``)."""
    cancel_requested: int
    """``bulk_cancel``: running jobs whose workers were asked to stop them (they end
    cancelled when the run ends)."""
    reopened: int
    """``bulk_retry`` with ``include_dependents``: descendants re-opened."""
    skipped: int
    skipped_jobs: tuple[SkippedJob, ...]
    """The first 100 skipped jobs."""


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker stream open on the replica that answered ``list_workers``."""

    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    capacity: int
    """The concurrency the worker announced."""
    in_flight: int
    """Its jobs reserved or running now."""
    credit: int
    """Claims it is ready for that were not sent yet."""
    connected_at: datetime | None
    token_id: str | None
    host: str | None = None
    """The host the worker said it runs on (host name or pod name); None: not said."""
    sdk: str | None = None
    """The SDK and version the worker said it runs (``runwick-python/0.1.0``); None: not said."""


@dataclass(frozen=True, slots=True)
class WorkerListing:
    """``list_workers``' answer: which replica answered, and its worker streams."""

    replica: str
    """Host name and process ID of the coordinator replica; each replica knows only its
    own streams."""
    workers: tuple[WorkerInfo, ...]


def _filter(
    queue: str | None, state: JobState | str | None, wire_name: str | None
) -> admin_service_pb2.JobFilter:
    for name, value in (("queue", queue), ("wire_name", wire_name)):
        if value is not None and not isinstance(value, str):
            raise ArgumentError(f"{name} must be a str or None, got {type(value).__name__}")
    message = admin_service_pb2.JobFilter(queue=queue or "", wire_name=wire_name or "")
    if state is not None:
        try:
            message.state = state_to_proto(JobState(state))
        except ValueError:
            raise ArgumentError(f"unknown job state {state!r}") from None
    if not (queue or wire_name or state):
        raise ArgumentError("give at least one of queue, state or wire_name")
    return message


def _skipped(response: Any) -> tuple[SkippedJob, ...]:
    return tuple(SkippedJob(s.job_id, s.reason, s.message) for s in response.skipped_jobs)


def cancelled_from_proto(response: admin_service_pb2.BulkCancelJobsResponse) -> BulkResult:
    return BulkResult(
        int(response.cancelled), int(response.cancel_requested), 0, int(response.skipped), _skipped(response)
    )


def retried_from_proto(response: admin_service_pb2.BulkRetryJobsResponse) -> BulkResult:
    return BulkResult(
        int(response.retried), 0, int(response.reopened), int(response.skipped), _skipped(response)
    )


def workers_from_proto(response: admin_service_pb2.ListWorkersResponse) -> WorkerListing:
    return WorkerListing(
        response.replica,
        tuple(
            WorkerInfo(
                worker_id=w.worker_id,
                queues=tuple(w.queues),
                wire_names=tuple(w.wire_names),
                capacity=w.capacity,
                in_flight=w.in_flight,
                credit=w.credit,
                connected_at=optional_datetime(w, "connected_at"),
                token_id=w.token_id or None,
                host=w.host or None,
                sdk=w.sdk or None,
            )
            for w in response.workers
        ),
    )


class AsyncBulkCalls(ClientBase):
    """The bulk and worker calls of ``AsyncClient``."""

    _admin: Any

    async def bulk_cancel(
        self, *, queue: str | None = None, state: JobState | str | None = None, wire_name: str | None = None
    ) -> BulkResult:
        """Cancels (R-8) every job that has not ended and matches all the filters given,
        in one call; the coordinator works through them in bounded batches, each job
        audited as ``cancel`` is. Needs the ``manage`` scope.

        Raises:
            ArgumentError: No filter, an unknown state, or a state that has ended;
                nothing changed.
        """
        request = admin_service_pb2.BulkCancelJobsRequest(filter=_filter(queue, state, wire_name))
        with translated_rpc_errors():
            response = await self._admin.BulkCancelJobs(request, **self._call_kwargs())
        return cancelled_from_proto(response)

    async def bulk_retry(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        wire_name: str | None = None,
        include_dependents: bool = False,
    ) -> BulkResult:
        """Retries by hand (R-9) every failed or cancelled job matching all the filters
        given, in one call, as ``bulk_cancel`` works. A job whose parent did not succeed
        is skipped (``PARENT_NOT_SUCCEEDED``). Needs ``manage``.

        Raises:
            ArgumentError: No filter, or a state other than ``failed``/``cancelled``.
        """
        request = admin_service_pb2.BulkRetryJobsRequest(
            filter=_filter(queue, state, wire_name), include_dependents=bool(include_dependents)
        )
        with translated_rpc_errors():
            response = await self._admin.BulkRetryJobs(request, **self._call_kwargs())
        return retried_from_proto(response)

    async def list_workers(self) -> WorkerListing:
        """The worker streams connected to the coordinator replica that answers, oldest
        first (another replica's streams are listed only by that replica). Needs ``read``."""
        with translated_rpc_errors():
            response = await self._admin.ListWorkers(
                admin_service_pb2.ListWorkersRequest(), **self._call_kwargs()
            )
        return workers_from_proto(response)


class BulkCalls(ClientBase):
    """The bulk and worker calls of ``Client``: the blocking twins of ``AsyncBulkCalls``."""

    _admin: Any

    def bulk_cancel(
        self, *, queue: str | None = None, state: JobState | str | None = None, wire_name: str | None = None
    ) -> BulkResult:
        """Cancels every matching job that has not ended; see ``AsyncClient.bulk_cancel``."""
        request = admin_service_pb2.BulkCancelJobsRequest(filter=_filter(queue, state, wire_name))
        with translated_rpc_errors():
            response = self._admin.BulkCancelJobs(request, **self._call_kwargs())
        return cancelled_from_proto(response)

    def bulk_retry(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        wire_name: str | None = None,
        include_dependents: bool = False,
    ) -> BulkResult:
        """Retries every matching failed or cancelled job; see ``AsyncClient.bulk_retry``."""
        request = admin_service_pb2.BulkRetryJobsRequest(
            filter=_filter(queue, state, wire_name), include_dependents=bool(include_dependents)
        )
        with translated_rpc_errors():
            response = self._admin.BulkRetryJobs(request, **self._call_kwargs())
        return retried_from_proto(response)

    def list_workers(self) -> WorkerListing:
        """The answering replica's worker streams; see ``AsyncClient.list_workers``."""
        with translated_rpc_errors():
            response = self._admin.ListWorkers(admin_service_pb2.ListWorkersRequest(), **self._call_kwargs())
        return workers_from_proto(response)
