"""``Client``: the blocking twin of ``AsyncClient`` (same arguments, same behaviour).

It shares everything but the transport with ``ClientBase``; every gRPC failure leaves it
as an SDK exception (see ``worker_sdk._errors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

import grpc

from worker_sdk._admin import AdminCalls
from worker_sdk._bulk import BulkCalls
from worker_sdk._client_base import DEFAULT_RPC_TIMEOUT, EnqueueItem, check_id, check_job_id
from worker_sdk._connection import ConnectionOptions, PemSource, connection_options
from worker_sdk._convert import attempt_from_proto, job_from_proto, revealed_from_proto
from worker_sdk._errors import translated_rpc_errors
from worker_sdk._info import AttemptInfo, EnqueuedJob, JobInfo, JobState, RevealedError
from worker_sdk._queues import QueueCalls
from worker_sdk._tracing import send_span
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc, job_service_pb2, job_service_pb2_grpc


class Client(AdminCalls, QueueCalls, BulkCalls):
    """The blocking twin of ``AsyncClient``: same arguments, same behaviour.

    Use it as ``with Client(...) as client:`` or call ``close()``.
    """

    def __init__(
        self,
        target: str | ConnectionOptions,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        rpc_timeout: timedelta | None = DEFAULT_RPC_TIMEOUT,
        ca: PemSource | None = None,
        cert: PemSource | None = None,
        key: PemSource | None = None,
        tls: bool = False,
    ) -> None:
        connection = connection_options(
            target,
            token=token,
            ca=ca,
            cert=cert,
            key=key,
            tls=tls,
            credentials=credentials,
            channel_options=options,
        )
        super().__init__(connection, rpc_timeout=rpc_timeout)
        self._channel = connection.open_channel()
        self._stub: Any = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._admin = admin_service_pb2_grpc.AdminServiceStub(self._channel)

    def enqueue(
        self,
        payload: object,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        parents: Sequence[str] = (),
        idempotency_key: str | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
    ) -> str:
        """Enqueues one job and returns its ID; see ``AsyncClient.enqueue``."""
        item = EnqueueItem(
            payload,
            run_at,
            priority,
            queue,
            parents,
            idempotency_key,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
        )
        return self.enqueue_many([item])[0]

    def enqueue_many(self, items: Iterable[EnqueueItem | object]) -> list[str]:
        """Enqueues a batch, all or nothing, and returns the job IDs in order."""
        request = self._enqueue_request(items)
        with send_span(request) as span, translated_rpc_errors():
            response = self._stub.Enqueue(request, **self._call_kwargs())
            ids = self._enqueued_ids(response, len(request.jobs))
            span.enqueued(ids)
        return ids

    def enqueue_raw(
        self,
        wire_name: str,
        payload: bytes,
        *,
        payload_version: int = 1,
        queue: str = "default",
        priority: int = 0,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        max_executions: int | None = None,
        parents: Sequence[str] = (),
        unique_key: str | None = None,
        retry_delay: timedelta | tuple[timedelta, timedelta] | None = None,
        execution_timeout: timedelta | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
        concurrency_key: str | None = None,
    ) -> EnqueuedJob:
        """Enqueues one job by wire name and encoded payload; see ``AsyncClient.enqueue_raw``."""
        request = self._raw_enqueue_request(
            wire_name,
            payload,
            payload_version=payload_version,
            queue=queue,
            priority=priority,
            run_at=run_at,
            idempotency_key=idempotency_key,
            max_executions=max_executions,
            parents=parents,
            unique_key=unique_key,
            retry_delay=retry_delay,
            execution_timeout=execution_timeout,
            traceparent=traceparent,
            tracestate=tracestate,
            concurrency_key=concurrency_key,
        )
        with send_span(request) as span, translated_rpc_errors():
            response = self._stub.Enqueue(request, **self._call_kwargs())
            enqueued = self._enqueued_one(response)
            span.enqueued([enqueued.id])
        return enqueued

    def get(self, job_id: str) -> JobInfo:
        """Returns the job; raises ``JobNotFound`` when it does not exist."""
        request = job_service_pb2.GetJobRequest(id=check_job_id(job_id))
        with translated_rpc_errors():
            response = self._stub.GetJob(request, **self._call_kwargs())
        return job_from_proto(response.job)

    def wait(self, job_id: str, timeout: timedelta = timedelta(seconds=30)) -> JobInfo:
        """Waits until the job is terminal or ``timeout`` passes; see ``AsyncClient.wait``."""
        check_job_id(job_id)
        deadline = self._wait_deadline(timeout)
        while True:
            request, call_timeout_s = self._wait_request(job_id, deadline)
            with translated_rpc_errors():
                response = self._stub.WaitJob(request, **self._call_kwargs(call_timeout_s))
            info = job_from_proto(response.job)
            if response.terminal or info.terminal or self._wait_over(deadline):
                return info

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        wire_name: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[JobInfo]:
        """Yields matching jobs, newest first, fetching pages as needed."""
        token = ""
        while True:
            request = self._list_request(queue, state, wire_name, page_size, token)
            with translated_rpc_errors():
                response = self._stub.ListJobs(request, **self._call_kwargs())
            for job in response.jobs:
                yield job_from_proto(job)
            token = response.next_page_token
            if not token:
                return

    def list_jobs_page(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        wire_name: str | None = None,
        page_size: int | None = None,
        page_token: str = "",
    ) -> tuple[list[JobInfo], str]:
        """One page of jobs and the next page's token; see ``AsyncClient.list_jobs_page``."""
        request = self._list_request(queue, state, wire_name, page_size, page_token)
        with translated_rpc_errors():
            response = self._stub.ListJobs(request, **self._call_kwargs())
        return [job_from_proto(job) for job in response.jobs], response.next_page_token

    def attempts(self, job_id: str) -> list[AttemptInfo]:
        """Returns the job's attempts, oldest first; see ``AsyncClient.attempts``."""
        request = job_service_pb2.ListAttemptsRequest(job_id=check_job_id(job_id))
        with translated_rpc_errors():
            response = self._stub.ListAttempts(request, **self._call_kwargs())
        return [attempt_from_proto(attempt) for attempt in response.attempts]

    def cancel(self, job_id: str) -> JobInfo:
        """Cancels the job (R-8); see ``AsyncClient.cancel``."""
        request = job_service_pb2.CancelJobRequest(id=check_job_id(job_id))
        with translated_rpc_errors():
            response = self._stub.CancelJob(request, **self._call_kwargs())
        return job_from_proto(response.job)

    def retry(self, job_id: str, *, include_dependents: bool = False) -> JobInfo:
        """Retries a failed or cancelled job by hand (R-9); see ``AsyncClient.retry``."""
        request = job_service_pb2.RetryJobRequest(
            id=check_job_id(job_id), include_dependents=bool(include_dependents)
        )
        with translated_rpc_errors():
            response = self._stub.RetryJob(request, **self._call_kwargs())
        return job_from_proto(response.job)

    def reveal_error(self, attempt_id: str) -> RevealedError:
        """Returns an attempt's error text, audited (R-22); see ``AsyncClient.reveal_error``."""
        request = job_service_pb2.RevealErrorRequest(attempt_id=check_id("attempt_id", attempt_id))
        with translated_rpc_errors():
            response = self._stub.RevealError(request, **self._call_kwargs())
        return revealed_from_proto(response)

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
