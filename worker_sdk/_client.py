"""``AsyncClient`` (grpc.aio) and ``Client`` (blocking): enqueue and read jobs.

Both share everything but the transport with ``ClientBase``; every gRPC failure leaves
them as an SDK exception (see ``worker_sdk._errors``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from worker_sdk._client_base import ClientBase, EnqueueItem, channel_options, check_id, check_job_id
from worker_sdk._convert import attempt_from_proto, job_from_proto, revealed_from_proto
from worker_sdk._errors import translated_rpc_errors
from worker_sdk._info import AttemptInfo, JobInfo, JobState, RevealedError
from worker_sdk._tls import PemSource, channel_credentials
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

_DEFAULT_RPC_TIMEOUT = timedelta(seconds=30)


def _open_channel(
    transport: Any,
    target: str,
    *,
    credentials: grpc.ChannelCredentials | None,
    options: Sequence[tuple[str, Any]],
    ca: PemSource | None,
    cert: PemSource | None,
    key: PemSource | None,
) -> Any:
    """A channel of ``transport`` (``grpc`` or ``grpc.aio``: same factory signatures),
    TLS when credentials or PEM material are given."""
    tls = channel_credentials(credentials=credentials, ca=ca, cert=cert, key=key)
    opts = channel_options(options)
    if tls is None:
        return transport.insecure_channel(target, options=opts)
    return transport.secure_channel(target, tls, options=opts)


class AsyncClient(ClientBase):
    """Enqueues and reads jobs over grpc.aio; create it inside a running event loop.

    Args:
        target: The coordinator address, e.g. ``"runwick:7233"``.
        token: Bearer token sent with every call (R-20); None for an insecure coordinator.
            Each call needs its scope (R-21): ``enqueue``, ``read`` (get, wait, lists),
            ``manage`` (cancel, retry), ``reveal`` (reveal_error).
        credentials: TLS channel credentials; None for a plaintext channel unless
            ``ca``/``cert``/``key`` are given.
        ca: TLS: the CA that signed the coordinator's certificate (path or PEM).
        cert: Mutual TLS: this client's certificate (path or PEM); needs ``key``.
        key: Mutual TLS: the private key of ``cert``.
        options: Extra gRPC channel options (they override the defaults).
        rpc_timeout: Deadline of each call except ``wait``; None for none.

    Use it as ``async with AsyncClient(...) as client:`` or call ``await close()``.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        rpc_timeout: timedelta | None = _DEFAULT_RPC_TIMEOUT,
        ca: PemSource | None = None,
        cert: PemSource | None = None,
        key: PemSource | None = None,
    ) -> None:
        super().__init__(token=token, rpc_timeout=rpc_timeout)
        self._channel: grpc.aio.Channel = _open_channel(
            grpc.aio, target, credentials=credentials, options=options, ca=ca, cert=cert, key=key
        )
        self._stub: Any = job_service_pb2_grpc.JobServiceStub(self._channel)

    async def enqueue(
        self,
        payload: object,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        parents: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> str:
        """Enqueues one job and returns its ID.

        Args:
            payload: An instance of a ``@job`` dataclass.
            run_at: Not before this (timezone-aware) time; None or past means now.
            priority: Overrides the job type's priority; higher runs first.
            queue: Overrides the job type's queue.
            parents: Job IDs that must succeed first (R-15).
            idempotency_key: With a key, a second enqueue returns the first job (R-14).

        Raises:
            ArgumentError: The payload or an argument is invalid (also on the coordinator).
            RunwickError: Any other failure, translated from gRPC.
        """
        item = EnqueueItem(payload, run_at, priority, queue, parents, idempotency_key)
        return (await self.enqueue_many([item]))[0]

    async def enqueue_many(self, items: Iterable[EnqueueItem | object]) -> list[str]:
        """Enqueues a batch, all or nothing, and returns the job IDs in order.

        Items are ``EnqueueItem`` values or bare payloads.
        """
        request = self._enqueue_request(items)
        with translated_rpc_errors():
            response = await self._stub.Enqueue(request, **self._call_kwargs())
        return self._enqueued_ids(response, len(request.jobs))

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

    async def retry(self, job_id: str) -> JobInfo:
        """Retries a ``failed`` or ``cancelled`` job by hand (R-9): a new generation with
        fresh budgets, available at once; earlier attempts stay. Needs ``manage``.

        Raises:
            FailedPrecondition: The job is in another state.
            JobNotFound: There is no such job.
        """
        request = job_service_pb2.RetryJobRequest(id=check_job_id(job_id))
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


class Client(ClientBase):
    """The blocking twin of ``AsyncClient``: same arguments, same behaviour.

    Use it as ``with Client(...) as client:`` or call ``close()``.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        rpc_timeout: timedelta | None = _DEFAULT_RPC_TIMEOUT,
        ca: PemSource | None = None,
        cert: PemSource | None = None,
        key: PemSource | None = None,
    ) -> None:
        super().__init__(token=token, rpc_timeout=rpc_timeout)
        self._channel: grpc.Channel = _open_channel(
            grpc, target, credentials=credentials, options=options, ca=ca, cert=cert, key=key
        )
        self._stub: Any = job_service_pb2_grpc.JobServiceStub(self._channel)

    def enqueue(
        self,
        payload: object,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        parents: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> str:
        """Enqueues one job and returns its ID; see ``AsyncClient.enqueue``."""
        item = EnqueueItem(payload, run_at, priority, queue, parents, idempotency_key)
        return self.enqueue_many([item])[0]

    def enqueue_many(self, items: Iterable[EnqueueItem | object]) -> list[str]:
        """Enqueues a batch, all or nothing, and returns the job IDs in order."""
        request = self._enqueue_request(items)
        with translated_rpc_errors():
            response = self._stub.Enqueue(request, **self._call_kwargs())
        return self._enqueued_ids(response, len(request.jobs))

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

    def retry(self, job_id: str) -> JobInfo:
        """Retries a failed or cancelled job by hand (R-9); see ``AsyncClient.retry``."""
        request = job_service_pb2.RetryJobRequest(id=check_job_id(job_id))
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
