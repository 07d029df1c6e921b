"""AdminService: tokens, the audit log and purges (``admin``), queue controls and
recurring schedules (``read`` to list them, ``manage`` to change them); the scopes are in
``api.auth``."""

from __future__ import annotations

from typing import Any

import grpc

from coordinator.api.auth import current_actor
from coordinator.api.convert import duration, duration_ms, state_from_pb, state_to_pb, timestamp
from coordinator.app import BulkOutcome, ConnectedWorker, Coordinator, JobFilter, SkippedJob
from coordinator.domain.backlog import QueueView
from coordinator.domain.records import DEFAULT_QUEUE, AuditEvent, QueueRecord, QueueStats, TokenRecord
from coordinator.domain.schedules import CatchUp, NewScheduleSpec, ScheduleView
from coordinator.errors import InvalidArgument
from worker_sdk.proto.runwick.v1 import admin_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc, queue_pb2

Context = grpc.aio.ServicerContext[Any, Any]


class AdminServicer(admin_service_pb2_grpc.AdminServiceServicer):
    def __init__(self, app: Coordinator) -> None:
        self.app = app

    async def CreateToken(self, request: pb.CreateTokenRequest, context: Context) -> pb.CreateTokenResponse:
        created = await self.app.create_token(
            request.name,
            list(request.scopes),
            list(request.queues),
            current_actor(context),
        )
        return pb.CreateTokenResponse(token=token_to_pb(created.record), secret=created.token)

    async def ListTokens(self, request: pb.ListTokensRequest, context: Context) -> pb.ListTokensResponse:
        records = await self.app.list_tokens(include_revoked=request.include_revoked)
        return pb.ListTokensResponse(tokens=[token_to_pb(r) for r in records])

    async def RevokeToken(self, request: pb.RevokeTokenRequest, context: Context) -> pb.RevokeTokenResponse:
        record = await self.app.revoke_token(request.id, current_actor(context))
        return pb.RevokeTokenResponse(token=token_to_pb(record))

    async def ListAuditEvents(
        self, request: pb.ListAuditEventsRequest, context: Context
    ) -> pb.ListAuditEventsResponse:
        events, token = await self.app.list_audit_events(
            action=request.action or None,
            target=request.target or None,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return pb.ListAuditEventsResponse(events=[event_to_pb(e) for e in events], next_page_token=token)

    async def ListQueues(
        self, request: queue_pb2.ListQueuesRequest, context: Context
    ) -> queue_pb2.ListQueuesResponse:
        stats, token = await self.app.list_queues(page_size=request.page_size, page_token=request.page_token)
        now_ms = self.app.clock.now_ms()
        return queue_pb2.ListQueuesResponse(
            queues=[queue_stats_to_pb(s, now_ms) for s in stats], next_page_token=token
        )

    async def GetQueue(
        self, request: queue_pb2.GetQueueRequest, context: Context
    ) -> queue_pb2.GetQueueResponse:
        view = await self.app.get_queue(request.name)
        return queue_pb2.GetQueueResponse(queue=queue_view_to_pb(view, self.app.clock.now_ms()))

    async def PauseQueue(
        self, request: queue_pb2.PauseQueueRequest, context: Context
    ) -> queue_pb2.PauseQueueResponse:
        record = await self.app.pause_queue(request.name, current_actor(context))
        return queue_pb2.PauseQueueResponse(queue=queue_to_pb(record))

    async def ResumeQueue(
        self, request: queue_pb2.ResumeQueueRequest, context: Context
    ) -> queue_pb2.ResumeQueueResponse:
        record = await self.app.resume_queue(request.name, current_actor(context))
        return queue_pb2.ResumeQueueResponse(queue=queue_to_pb(record))

    async def SetQueueLimit(
        self, request: queue_pb2.SetQueueLimitRequest, context: Context
    ) -> queue_pb2.SetQueueLimitResponse:
        limit = request.limit if request.HasField("limit") else None
        record = await self.app.set_queue_limit(request.name, limit, current_actor(context))
        return queue_pb2.SetQueueLimitResponse(queue=queue_to_pb(record))

    async def SetQueueKeyLimit(
        self, request: queue_pb2.SetQueueKeyLimitRequest, context: Context
    ) -> queue_pb2.SetQueueKeyLimitResponse:
        limit = request.limit if request.HasField("limit") else None
        record = await self.app.set_queue_key_limit(request.name, limit, current_actor(context))
        return queue_pb2.SetQueueKeyLimitResponse(queue=queue_to_pb(record))

    async def SetQueueRate(
        self, request: queue_pb2.SetQueueRateRequest, context: Context
    ) -> queue_pb2.SetQueueRateResponse:
        count, period_ms, per_key = None, 0, False
        if request.HasField("rate"):
            count, per_key = request.rate.count, request.rate.per_key
            period_ms = duration_ms(request.rate.period, "rate.period")
        record = await self.app.set_queue_rate(
            request.name, count, period_ms, per_key, current_actor(context)
        )
        return queue_pb2.SetQueueRateResponse(queue=queue_to_pb(record))

    async def DeleteQueue(
        self, request: queue_pb2.DeleteQueueRequest, context: Context
    ) -> queue_pb2.DeleteQueueResponse:
        record = await self.app.delete_queue(request.name, current_actor(context))
        return queue_pb2.DeleteQueueResponse(queue=queue_to_pb(record))

    # -- recurring schedules (R-18) -------------------------------------------------------

    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, context: Context
    ) -> pb.CreateScheduleResponse:
        spec = NewScheduleSpec(
            name=request.name,
            cron=request.cron,
            timezone=request.timezone,
            wire_name=request.wire_name,
            payload=request.payload,
            queue=request.queue or DEFAULT_QUEUE,
            catch_up=catch_up_from_pb(request.catch_up),
        )
        view = await self.app.create_schedule(spec, current_actor(context))
        return pb.CreateScheduleResponse(schedule=schedule_to_pb(view))

    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: Context
    ) -> pb.ListSchedulesResponse:
        views, token = await self.app.list_schedules(
            page_size=request.page_size, page_token=request.page_token
        )
        return pb.ListSchedulesResponse(schedules=[schedule_to_pb(v) for v in views], next_page_token=token)

    async def PauseSchedule(
        self, request: pb.PauseScheduleRequest, context: Context
    ) -> pb.PauseScheduleResponse:
        view = await self.app.pause_schedule(request.name, current_actor(context))
        return pb.PauseScheduleResponse(schedule=schedule_to_pb(view))

    async def ResumeSchedule(
        self, request: pb.ResumeScheduleRequest, context: Context
    ) -> pb.ResumeScheduleResponse:
        view = await self.app.resume_schedule(request.name, current_actor(context))
        return pb.ResumeScheduleResponse(schedule=schedule_to_pb(view))

    async def DeleteSchedule(
        self, request: pb.DeleteScheduleRequest, context: Context
    ) -> pb.DeleteScheduleResponse:
        view = await self.app.delete_schedule(request.name, current_actor(context))
        return pb.DeleteScheduleResponse(schedule=schedule_to_pb(view))

    # -- retention (R-19) -----------------------------------------------------------------

    async def PurgeJobs(self, request: pb.PurgeJobsRequest, context: Context) -> pb.PurgeJobsResponse:
        state = state_from_pb(request.state, "state")
        older_than = duration_ms(request.older_than, "older_than") if request.HasField("older_than") else None
        purged = await self.app.purge_jobs(state, older_than, current_actor(context))
        return pb.PurgeJobsResponse(purged=purged)

    # -- bulk operations and workers --------------------------------------------------------

    async def BulkCancelJobs(
        self, request: pb.BulkCancelJobsRequest, context: Context
    ) -> pb.BulkCancelJobsResponse:
        outcome = await self.app.bulk_cancel(job_filter_from_pb(request.filter), current_actor(context))
        return pb.BulkCancelJobsResponse(
            cancelled=outcome.done,
            cancel_requested=outcome.requested,
            skipped=outcome.skipped,
            skipped_jobs=skipped_to_pb(outcome),
        )

    async def BulkRetryJobs(
        self, request: pb.BulkRetryJobsRequest, context: Context
    ) -> pb.BulkRetryJobsResponse:
        outcome = await self.app.bulk_retry(
            job_filter_from_pb(request.filter),
            current_actor(context),
            include_dependents=request.include_dependents,
        )
        return pb.BulkRetryJobsResponse(
            retried=outcome.done,
            reopened=outcome.reopened,
            skipped=outcome.skipped,
            skipped_jobs=skipped_to_pb(outcome),
        )

    async def ListWorkers(self, request: pb.ListWorkersRequest, context: Context) -> pb.ListWorkersResponse:
        workers = await self.app.list_workers()
        return pb.ListWorkersResponse(replica=self.app.replica, workers=[worker_to_pb(w) for w in workers])


def job_filter_from_pb(message: pb.JobFilter) -> JobFilter:
    return JobFilter(
        queue=message.queue or None,
        state=state_from_pb(message.state, "filter.state"),
        wire_name=message.wire_name or None,
    )


def skipped_to_pb(outcome: BulkOutcome) -> list[pb.SkippedJob]:
    return [_skipped_job(s) for s in outcome.skipped_jobs]


def _skipped_job(skipped: SkippedJob) -> pb.SkippedJob:
    return pb.SkippedJob(job_id=skipped.job_id, reason=skipped.reason, message=skipped.message)


def worker_to_pb(worker: ConnectedWorker) -> pb.ConnectedWorker:
    return pb.ConnectedWorker(
        worker_id=worker.worker_id,
        queues=list(worker.queues),
        wire_names=list(worker.wire_names),
        capacity=worker.capacity,
        in_flight=worker.in_flight,
        credit=worker.credit,
        connected_at=timestamp(worker.connected_at_ms),
        token_id=worker.token_id or "",
        host=worker.host,
        sdk=worker.sdk,
    )


def queue_to_pb(record: QueueRecord) -> queue_pb2.Queue:
    message = queue_pb2.Queue(name=record.name, paused=record.paused)
    if record.concurrency_limit is not None:
        message.concurrency_limit = record.concurrency_limit
    if record.key_limit is not None:
        message.key_limit = record.key_limit
    if record.rate_count is not None and record.rate_period_ms is not None:
        message.rate.count = record.rate_count
        message.rate.period.CopyFrom(duration(record.rate_period_ms))
        message.rate.per_key = record.rate_per_key
    return message


def queue_stats_to_pb(stats: QueueStats, now_ms: int) -> queue_pb2.Queue:
    message = queue_to_pb(stats.queue)
    for state, count in stats.counts.items():
        message.counts.add(state=state_to_pb(state), count=count)
    if stats.active_keys is not None:
        message.active_keys = stats.active_keys
    if stats.keys_at_limit is not None:
        message.keys_at_limit = stats.keys_at_limit
    if stats.keys_at_rate is not None:
        message.keys_at_rate = stats.keys_at_rate
    message.first_keys_at_limit.extend(stats.first_keys_at_limit)
    message.first_keys_at_rate.extend(stats.first_keys_at_rate)
    if stats.oldest_due_run_at_ms is not None:
        message.oldest_available_age.CopyFrom(duration(max(now_ms - stats.oldest_due_run_at_ms, 0)))
    return message


def queue_view_to_pb(view: QueueView, now_ms: int) -> queue_pb2.Queue:
    message = queue_stats_to_pb(view.stats, now_ms)
    for kind, count in view.held.held.items():
        message.held_back.add(kind=kind.value, count=count)
    message.runnable = view.held.runnable
    return message


def token_to_pb(record: TokenRecord) -> pb.Token:
    message = pb.Token(
        id=record.id,
        name=record.name,
        scopes=sorted(s.value for s in record.scopes),
        queues=sorted(record.queues or ()),
        created_at=timestamp(record.created_at_ms),
        created_by=record.created_by or "",
    )
    if record.revoked_at_ms is not None:
        message.revoked_at.CopyFrom(timestamp(record.revoked_at_ms))
    return message


def event_to_pb(event: AuditEvent) -> pb.AuditEvent:
    return pb.AuditEvent(
        id=event.id or 0,
        at=timestamp(event.at_ms),
        actor_token_id=event.actor_token_id or "",
        actor_name=event.actor_name,
        action=event.action,
        target=event.target,
        peer=event.peer,
        detail=event.detail or "",
    )


_CATCH_UP_TO_PB = {policy: pb.CatchUp.Value(f"CATCH_UP_{policy.name}") for policy in CatchUp}
PB_TO_CATCH_UP = {value: policy for policy, value in _CATCH_UP_TO_PB.items()}


def catch_up_from_pb(value: int) -> CatchUp:
    """UNSPECIFIED is ``skip``; InvalidArgument for values this server does not know."""
    if value == pb.CATCH_UP_UNSPECIFIED:
        return CatchUp.SKIP
    if value not in PB_TO_CATCH_UP:
        raise InvalidArgument(
            "catch_up",
            f"unknown catch-up policy {value}; use CATCH_UP_SKIP or CATCH_UP_RUN_ONCE",
            reason="UNKNOWN_ENUM",
        )
    return PB_TO_CATCH_UP[value]


def schedule_to_pb(view: ScheduleView) -> pb.Schedule:
    record = view.record
    message = pb.Schedule(
        name=record.name,
        cron=record.cron,
        timezone=record.timezone,
        wire_name=record.wire_name,
        payload=record.payload,
        queue=record.queue,
        catch_up=_CATCH_UP_TO_PB[record.catch_up],  # type: ignore[arg-type]
        paused=record.paused,
        created_at=timestamp(record.created_at_ms),
        updated_at=timestamp(record.updated_at_ms),
        last_job_id=record.last_job_id or "",
        next_runs=[timestamp(ms) for ms in view.next_runs_ms],
        skipped_ticks=[timestamp(ms) for ms in view.skipped_ticks_ms],
    )
    if record.last_tick_ms is not None:
        message.last_tick.CopyFrom(timestamp(record.last_tick_ms))
    return message
