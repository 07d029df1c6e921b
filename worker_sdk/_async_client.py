"""``AsyncClient``: enqueue and read jobs, manage them, and administer tokens over grpc.aio.

It shares everything but the transport with ``ClientBase`` (and ``Client``, its blocking
twin); every gRPC failure leaves it as an SDK exception (see ``worker_sdk._errors``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

import grpc

from worker_sdk._admin import AsyncAdminCalls
from worker_sdk._bulk import AsyncBulkCalls
from worker_sdk._client_base import DEFAULT_RPC_TIMEOUT, EnqueueItem, check_id, check_job_id
from worker_sdk._connection import ConnectionOptions, PemSource, connection_options
from worker_sdk._convert import attempt_from_proto, job_from_proto, revealed_from_proto
from worker_sdk._errors import translated_rpc_errors
from worker_sdk._info import AttemptInfo, EnqueuedJob, JobInfo, JobState, RevealedError
from worker_sdk._queues import AsyncQueueCalls
from worker_sdk._tracing import send_span
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc, job_service_pb2, job_service_pb2_grpc


class AsyncClient(AsyncAdminCalls, AsyncQueueCalls, AsyncBulkCalls):
    """Enqueues and reads jobs over grpc.aio; create it inside a running event loop.

    Args:
        target: The coordinator address, e.g. ``"runwick:7233"``; or a
            ``ConnectionOptions`` holding it with the token and TLS settings (then pass
            none of the other connection arguments).
        token: Bearer token sent with every call (R-20); None for an insecure coordinator.
            Each call needs its scope (R-21): ``enqueue``, ``read`` (get, wait, lists),
            ``manage`` (cancel, retry), ``reveal`` (reveal_error), ``admin`` (tokens and
            the audit log).
        credentials: TLS channel credentials; None for a plaintext channel unless
            ``ca``/``cert``/``key`` or ``tls`` are given.
        ca: TLS: the CA that signed the coordinator's certificate (path or PEM).
        cert: Mutual TLS: this client's certificate (path or PEM); needs ``key``.
        key: Mutual TLS: the private key of ``cert``.
        tls: TLS trusting the system's roots, without ``ca``/``cert``/``key``.
        options: Extra gRPC channel options (they override the defaults).
        rpc_timeout: Deadline of each call except ``wait``; None for none.

    Raises:
        ArgumentError: The connection arguments are inconsistent (see
            ``ConnectionOptions``).

    Use it as ``async with AsyncClient(...) as client:`` or call ``await close()``.
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
        self._channel = connection.open_aio_channel()
        self._stub: Any = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._admin = admin_service_pb2_grpc.AdminServiceStub(self._channel)

    async def enqueue(
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
        """Enqueues one job and returns its ID.

        Args:
            payload: An instance of a ``@job`` dataclass.
            run_at: Not before this (timezone-aware) time; None or past means now.
            priority: Overrides the job type's priority; higher runs first.
            queue: Overrides the job type's queue.
            parents: Job IDs that must succeed first (R-15).
            idempotency_key: With a key, a second enqueue returns the first job (R-14).
            unique_key: While a job of this type with this key has not ended, an
                enqueue with it returns that job's ID instead of creating another.
            concurrency_key: The job's concurrency key, which a queue's per-key limit
                counts it under (docs/flow-control.md); None takes the job type's
                (``@job(concurrency_key=...)``), else the implicit key shared by
                every job without one.

        Raises:
            ArgumentError: The payload or an argument is invalid (also on the coordinator).
            RunwickError: Any other failure, translated from gRPC.
        """
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
        return (await self.enqueue_many([item]))[0]

    async def enqueue_many(self, items: Iterable[EnqueueItem | object]) -> list[str]:
        """Enqueues a batch, all or nothing, and returns the job IDs in order.

        Items are ``EnqueueItem`` values or bare payloads.
        """
        request = self._enqueue_request(items)
        with send_span(request) as span, translated_rpc_errors():
            response = await self._stub.Enqueue(request, **self._call_kwargs())
            ids = self._enqueued_ids(response, len(request.jobs))
            span.enqueued(ids)
        return ids

    async def enqueue_raw(
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
        """Enqueues one job given by wire name and encoded payload, for tools that have
        no ``@job`` class for it (the ``runwick jobs enqueue`` command).

        The values go to the coordinator as given and are checked there (only their
        types are checked here); this client's ``job_defaults`` apply, under
        ``max_executions``.

        Args:
            wire_name: The job type's name on the wire.
            payload: The payload as its worker decodes it (UTF-8 JSON for SDK workers).
            payload_version: The payload's version.
            queue: The queue the job goes to.
            priority: Higher runs first within a queue.
            run_at: Not before this (timezone-aware) time; None or past means now.
            idempotency_key: With a key, a second enqueue returns the first job (R-14).
            max_executions: Started runs allowed (R-1); None leaves it to the defaults.
            parents: Job IDs that must succeed first (R-15).
            unique_key: While a job of this wire name with this key has not ended, the
                enqueue returns it instead of a new one.
            retry_delay: The delay before a retry (R-2): a timedelta sets the initial
                delay, a pair ``(initial, maximum)`` both; None leaves it to the defaults.
            execution_timeout: How long one run may take (R-7); None leaves it to the
                defaults.
            traceparent: A W3C ``traceparent`` to carry with the job, in place of the
                current span's context (a job enqueued on behalf of a traced request
                elsewhere); checked as the coordinator checks it.
            tracestate: Its ``tracestate`` (at most 512 bytes); needs ``traceparent``.
            concurrency_key: The job's concurrency key (docs/flow-control.md); None
                is the implicit key.

        No ``@job`` declaration is known here: what is not given comes from this
        client's ``job_defaults``, then the coordinator's JobDefaults, then the library
        defaults (3 executions, 5 s doubling to 60 s, no timeout).

        Returns:
            The job's ID and state, and whether an idempotency key matched an earlier job.

        Raises:
            ArgumentError: An argument has the wrong type, a malformed trace context,
                or the coordinator refused a value (``field_violations`` names it).
            RunwickError: Any other failure, translated from gRPC.
        """
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
            response = await self._stub.Enqueue(request, **self._call_kwargs())
            enqueued = self._enqueued_one(response)
            span.enqueued([enqueued.id])
        return enqueued

    async def get(self, job_id: str) -> JobInfo:
        """Returns the job; raises ``JobNotFound`` when it does not exist."""
        request = job_service_pb2.GetJobRequest(id=check_job_id(job_id))
        with translated_rpc_errors():
            response = await self._stub.GetJob(request, **self._call_kwargs())
        return job_from_proto(response.job)

    # The name ``timeout`` is the API: how long the coordinator-side wait may last.
    async def wait(self, job_id: str, timeout: timedelta = timedelta(seconds=30)) -> JobInfo:  # noqa: ASYNC109
        """Waits until the job is terminal or ``timeout`` passes, and returns it as it is.

        Check ``info.terminal`` to tell the two apart.
        """
        check_job_id(job_id)
        deadline = self._wait_deadline(timeout)
        while True:
            request, call_timeout_s = self._wait_request(job_id, deadline)
            with translated_rpc_errors():
                response = await self._stub.WaitJob(request, **self._call_kwargs(call_timeout_s))
            info = job_from_proto(response.job)
            if response.terminal or info.terminal or self._wait_over(deadline):
                return info

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        wire_name: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[JobInfo]:
        """Yields matching jobs, newest first, fetching pages as needed.

        Listed jobs leave out payload and output.
        """
        token = ""
        while True:
            request = self._list_request(queue, state, wire_name, page_size, token)
            with translated_rpc_errors():
                response = await self._stub.ListJobs(request, **self._call_kwargs())
            for job in response.jobs:
                yield job_from_proto(job)
            token = response.next_page_token
            if not token:
                return

    async def list_jobs_page(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        wire_name: str | None = None,
        page_size: int | None = None,
        page_token: str = "",
    ) -> tuple[list[JobInfo], str]:
        """One page of ``list_jobs``: the jobs and the token of the next page (empty on
        the last). ``page_size`` is clamped to the coordinator's maximum page size.

        Raises:
            ArgumentError: A malformed ``page_token`` (``PAGE_TOKEN_INVALID``), or a bad filter.
        """
        request = self._list_request(queue, state, wire_name, page_size, page_token)
        with translated_rpc_errors():
            response = await self._stub.ListJobs(request, **self._call_kwargs())
        return [job_from_proto(job) for job in response.jobs], response.next_page_token

    async def attempts(self, job_id: str) -> list[AttemptInfo]:
        """Returns the job's attempts, oldest first, earlier generations included (each
        carries its ``generation``). Error code and exception type only: see
        ``reveal_error`` for the text."""
        request = job_service_pb2.ListAttemptsRequest(job_id=check_job_id(job_id))
        with translated_rpc_errors():
            response = await self._stub.ListAttempts(request, **self._call_kwargs())
        return [attempt_from_proto(attempt) for attempt in response.attempts]

    async def cancel(self, job_id: str) -> JobInfo:
        """Cancels the job (R-8) and returns it as it is after the cancel.

        A job that is not running ends ``cancelled`` at once. A running job comes back
        still ``running`` with ``cancel_requested`` set: its handler's cancellation fires
        on the worker and the job ends ``cancelled`` (``wait`` for it), or ``succeeded``
        if the handler finished first. Needs the ``manage`` scope.

        Raises:
            FailedPrecondition: The job already ended.
            JobNotFound: There is no such job.
        """
        request = job_service_pb2.CancelJobRequest(id=check_job_id(job_id))
        with translated_rpc_errors():
            response = await self._stub.CancelJob(request, **self._call_kwargs())
        return job_from_proto(response.job)

    async def retry(self, job_id: str, *, include_dependents: bool = False) -> JobInfo:
        """Retries a ``failed`` or ``cancelled`` job by hand (R-9): a new generation with
        fresh budgets, available at once (or waiting, when its parents have still to
        succeed); earlier attempts stay. Needs ``manage``.

        Args:
            job_id: The job to retry.
            include_dependents: Also re-open its descendants that failed
                ``parent_failed`` because of it: they wait again for their parents (R-15).

        Raises:
            FailedPrecondition: The job is in another state, or a parent of it failed
                (retry that parent, with its dependents).
            JobNotFound: There is no such job.
        """
        request = job_service_pb2.RetryJobRequest(
            id=check_job_id(job_id), include_dependents=bool(include_dependents)
        )
        with translated_rpc_errors():
            response = await self._stub.RetryJob(request, **self._call_kwargs())
        return job_from_proto(response.job)

    async def reveal_error(self, attempt_id: str) -> RevealedError:
        """Returns an attempt's exception message and full text (R-22). Needs the
        ``reveal`` scope; the coordinator audits every reveal.

        Raises:
            JobNotFound: There is no such attempt.
            PermissionDenied: The token lacks ``reveal``.
        """
        request = job_service_pb2.RevealErrorRequest(attempt_id=check_id("attempt_id", attempt_id))
        with translated_rpc_errors():
            response = await self._stub.RevealError(request, **self._call_kwargs())
        return revealed_from_proto(response)

    async def close(self) -> None:
        """Closes the channel; calls in progress are cancelled."""
        await self._channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
