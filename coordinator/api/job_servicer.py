"""JobService: decode, call the facade, encode."""

from __future__ import annotations

from typing import Any

import grpc

from coordinator.api import convert
from coordinator.api.auth import current_actor, current_principal
from coordinator.app import Coordinator
from worker_sdk.proto.runwick.v1 import job_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import job_service_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class JobServicer(job_service_pb2_grpc.JobServiceServicer):
    def __init__(self, app: Coordinator) -> None:
        self.app = app

    async def Enqueue(self, request: pb.EnqueueRequest, context: Context) -> pb.EnqueueResponse:
        specs = [convert.new_job_spec(job, index) for index, job in enumerate(request.jobs)]
        # A token restricted to queues names parents in those queues only (docs/security.md).
        enqueued = await self.app.enqueue(specs, reachable=current_principal().queues)
        response = pb.EnqueueResponse()
        add = response.jobs.add  # each entry built in place: a list of messages is copied in
        for item in enqueued:
            add(id=item.job_id, existing=item.existing, state=convert.state_to_pb(item.state))
        return response

    async def GetJob(self, request: pb.GetJobRequest, context: Context) -> pb.GetJobResponse:
        job = await self.app.get_job(request.id)
        relatives = await self.app.relatives(job)
        message = convert.job_to_pb(job, relatives=relatives)
        progress = await self.app.current_progress(job)
        if progress is not None:
            message.progress.CopyFrom(convert.progress_to_pb(progress))
        message.waiting_reason = await self.app.waiting_reason(job)
        return pb.GetJobResponse(job=message)

    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        jobs, token = await self.app.list_jobs(
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
        attempts = await self.app.list_attempts(request.job_id)
        return pb.ListAttemptsResponse(attempts=[convert.attempt_to_pb(a) for a in attempts])

    async def WaitJob(self, request: pb.WaitJobRequest, context: Context) -> pb.WaitJobResponse:
        timeout_ms = convert.duration_ms(request.timeout, "timeout") if request.HasField("timeout") else None
        job = await self.app.wait_job(request.id, timeout_ms)
        relatives = await self.app.relatives(job)
        return pb.WaitJobResponse(
            job=convert.job_to_pb(job, relatives=relatives), terminal=job.state.terminal
        )

    async def CancelJob(self, request: pb.CancelJobRequest, context: Context) -> pb.CancelJobResponse:
        job = await self.app.cancel(request.id, current_actor(context))
        return pb.CancelJobResponse(job=convert.job_to_pb(job))

    async def RetryJob(self, request: pb.RetryJobRequest, context: Context) -> pb.RetryJobResponse:
        job, reopened = await self.app.retry(
            request.id, current_actor(context), include_dependents=request.include_dependents
        )
        return pb.RetryJobResponse(job=convert.job_to_pb(job), reopened_ids=list(reopened))

    async def RevealError(self, request: pb.RevealErrorRequest, context: Context) -> pb.RevealErrorResponse:
        attempt = await self.app.reveal_error(request.attempt_id, current_actor(context))
        return pb.RevealErrorResponse(
            attempt_id=attempt.id,
            job_id=attempt.job_id,
            generation=attempt.generation,
            error_code=attempt.error_code or "",
            exception_type=attempt.exception_type or "",
            message=attempt.message or "",
            detail=attempt.detail or "",
        )
