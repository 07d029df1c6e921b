"""JobService: decode, call the service on an executor thread, encode."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, ParamSpec, TypeVar

import grpc

from coordinator.api import convert
from coordinator.api.auth import current_actor
from coordinator.dispatch import Dispatcher
from coordinator.errors import InvalidArgument
from coordinator.manage import ManagementService
from coordinator.service import JobsService
from coordinator.watch import TerminalWatch
from worker_sdk.proto.runwick.v1 import job_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import job_service_pb2_grpc

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 3_600_000
Context = grpc.aio.ServicerContext[Any, Any]


class JobServicer(job_service_pb2_grpc.JobServiceServicer):
    def __init__(
        self,
        service: JobsService,
        dispatcher: Dispatcher,
        watch: TerminalWatch,
        executor: Executor,
        recheck_s: float,
        manage: ManagementService,
    ) -> None:
        self.manage = manage
        self.service = service
        self.dispatcher = dispatcher
        self.watch = watch
        self.executor = executor
        self.recheck_s = recheck_s

    async def _call(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: function(*args, **kwargs))

    async def Enqueue(self, request: pb.EnqueueRequest, context: Context) -> pb.EnqueueResponse:
        specs = [convert.new_job_spec(job, index) for index, job in enumerate(request.jobs)]
        enqueued = await self._call(self.service.enqueue, specs)
        for spec, item in zip(specs, enqueued, strict=True):
            if not item.existing:
                self.dispatcher.jobs_available(spec.run_at_ms)
        return pb.EnqueueResponse(
            jobs=[
                pb.EnqueuedJob(id=item.job_id, existing=item.existing, state=convert.state_to_pb(item.state))  # type: ignore[arg-type]
                for item in enqueued
            ]
        )

    async def GetJob(self, request: pb.GetJobRequest, context: Context) -> pb.GetJobResponse:
        job = await self._call(self.service.get_job, request.id)
        return pb.GetJobResponse(job=convert.job_to_pb(job))

    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        jobs, token = await self._call(
            self.service.list_jobs,
            queue=request.queue or None,
            state=convert.state_from_pb(request.state, "state"),
            wire_name=request.wire_name or None,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return pb.ListJobsResponse(
            jobs=[convert.job_to_pb(job, include_blobs=False) for job in jobs], next_page_token=token
        )

    async def ListAttempts(
        self, request: pb.ListAttemptsRequest, context: Context
    ) -> pb.ListAttemptsResponse:
        attempts = await self._call(self.service.list_attempts, request.job_id)
        return pb.ListAttemptsResponse(attempts=[convert.attempt_to_pb(a) for a in attempts])

    async def WaitJob(self, request: pb.WaitJobRequest, context: Context) -> pb.WaitJobResponse:
        timeout_ms = DEFAULT_WAIT_MS
        if request.HasField("timeout"):
            timeout_ms = convert.duration_ms(request.timeout, "timeout")
            if not 0 <= timeout_ms <= MAX_WAIT_MS:
                raise InvalidArgument(
                    "timeout", f"must be 0 to 1 h, got {timeout_ms} ms", reason="INVALID_DURATION"
                )
        job = await self._call(self.service.get_job, request.id)
        event = self.watch.register(job.id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        try:
            while not job.state.terminal and loop.time() < deadline:
                # Woken by this replica's writes; the periodic re-read covers the others.
                remaining = min(deadline - loop.time(), self.recheck_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), max(remaining, 0))
                job = await self._call(self.service.get_job, job.id)
                if event.is_set():
                    self.watch.unregister(job.id, event)
                    event = self.watch.register(job.id)
        finally:
            self.watch.unregister(job.id, event)
        return pb.WaitJobResponse(job=convert.job_to_pb(job), terminal=job.state.terminal)

    async def CancelJob(self, request: pb.CancelJobRequest, context: Context) -> pb.CancelJobResponse:
        cancelled = await self._call(self.manage.cancel, request.id, current_actor(context))
        if cancelled.push is not None:
            self.dispatcher.cancel_attempt(cancelled.push.worker_id, cancelled.push.attempt_id)
        if cancelled.job.state.terminal:
            self.watch.finished([cancelled.job.id])
        return pb.CancelJobResponse(job=convert.job_to_pb(cancelled.job))

    async def RetryJob(self, request: pb.RetryJobRequest, context: Context) -> pb.RetryJobResponse:
        job = await self._call(self.manage.retry, request.id, current_actor(context))
        self.dispatcher.jobs_available()
        return pb.RetryJobResponse(job=convert.job_to_pb(job))

    async def RevealError(self, request: pb.RevealErrorRequest, context: Context) -> pb.RevealErrorResponse:
        attempt = await self._call(self.manage.reveal_error, request.attempt_id, current_actor(context))
        return pb.RevealErrorResponse(
            attempt_id=attempt.id,
            job_id=attempt.job_id,
            generation=attempt.generation,
            error_code=attempt.error_code or "",
            exception_type=attempt.exception_type or "",
            message=attempt.message or "",
            detail=attempt.detail or "",
        )
