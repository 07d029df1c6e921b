"""The admin calls of ``AsyncClient`` and ``Client``: API tokens, the audit log, purges
of finished jobs, and recurring schedules.

Token and audit calls need a token with the ``admin`` scope (R-21); schedule changes
need ``manage`` and listing them ``read``. The requests are built here once; the two
classes below only add the transport, and each client inherits one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta
from typing import Any

from worker_sdk._client_base import ClientBase, check_id
from worker_sdk._convert import (
    audit_event_from_proto,
    created_token_from_proto,
    duration,
    state_to_proto,
    token_from_proto,
)
from worker_sdk._errors import ArgumentError, translated_rpc_errors
from worker_sdk._info import AuditEvent, CreatedToken, JobState, TokenInfo
from worker_sdk._schedules import (
    CatchUp,
    ScheduleInfo,
    create_schedule_request,
    schedule_from_proto,
    schedule_name,
)
from worker_sdk.proto.runwick.v1 import admin_service_pb2


def _names(what: str, values: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        raise ArgumentError(f"{what} must be a sequence of str, not one str")
    names = list(values)
    if not all(isinstance(value, str) for value in names):
        raise ArgumentError(f"{what} must hold str values")
    return names


def _create_request(
    name: str, scopes: Sequence[str], queues: Sequence[str]
) -> admin_service_pb2.CreateTokenRequest:
    if not isinstance(name, str):
        raise ArgumentError(f"name must be a str, got {type(name).__name__}")
    return admin_service_pb2.CreateTokenRequest(
        name=name, scopes=_names("scopes", scopes), queues=_names("queues", queues)
    )


def _audit_request(
    action: str | None, target: str | None, page_size: int | None, page_token: str
) -> admin_service_pb2.ListAuditEventsRequest:
    return admin_service_pb2.ListAuditEventsRequest(
        page_size=page_size or 0, page_token=page_token, action=action or "", target=target or ""
    )


def _purge_request(state: JobState | str, older_than: timedelta) -> admin_service_pb2.PurgeJobsRequest:
    """The request; which states may be purged and how old is the coordinator's to check."""
    try:
        value = JobState(state)
    except ValueError:
        raise ArgumentError(f"unknown job state {state!r}") from None
    if not isinstance(older_than, timedelta):
        raise ArgumentError(f"older_than must be a timedelta, got {type(older_than).__name__}")
    return admin_service_pb2.PurgeJobsRequest(state=state_to_proto(value), older_than=duration(older_than))


class AsyncAdminCalls(ClientBase):
    """The admin calls of ``AsyncClient``."""

    _admin: Any
    """The AdminService stub on the client's channel."""

    async def create_token(
        self, name: str, scopes: Sequence[str], *, queues: Sequence[str] = ()
    ) -> CreatedToken:
        """Creates an API token; its secret is in the answer and nowhere else.

        Args:
            name: A label for people, 1-128 characters, e.g. ``billing-worker``.
            scopes: What the token may do (R-21): any of ``enqueue``, ``read``,
                ``manage``, ``reveal``, ``work``, ``admin``.
            queues: For ``work`` and ``enqueue`` tokens: the only queues its worker may
                take jobs from, and it may enqueue into and name parents in; empty
                allows any.

        Raises:
            ArgumentError: The name, a scope or the queues are invalid (the coordinator
                checks them).
            PermissionDenied: This client's token lacks ``admin``.
        """
        request = _create_request(name, scopes, queues)
        with translated_rpc_errors():
            response = await self._admin.CreateToken(request, **self._call_kwargs())
        return created_token_from_proto(response)

    async def list_tokens(self, *, include_revoked: bool = False) -> list[TokenInfo]:
        """Returns the tokens, oldest first, never their secrets.

        Args:
            include_revoked: Also list revoked tokens.
        """
        request = admin_service_pb2.ListTokensRequest(include_revoked=bool(include_revoked))
        with translated_rpc_errors():
            response = await self._admin.ListTokens(request, **self._call_kwargs())
        return [token_from_proto(token) for token in response.tokens]

    async def revoke_token(self, token_id: str) -> TokenInfo:
        """Revokes a token at once and returns it; calls with it fail from then on, and
        worker streams opened with it end.

        Raises:
            JobNotFound: There is no such token (NOT_FOUND).
            FailedPrecondition: The token is already revoked.
        """
        request = admin_service_pb2.RevokeTokenRequest(id=check_id("token_id", token_id))
        with translated_rpc_errors():
            response = await self._admin.RevokeToken(request, **self._call_kwargs())
        return token_from_proto(response.token)

    async def list_audit_events(
        self, *, action: str | None = None, target: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[AuditEvent]:
        """Yields audit events (R-22), newest first, fetching pages as needed.

        Args:
            action: Only events of this action, e.g. ``attempt.reveal_error``.
            target: Only events about this job, attempt or token ID.
            page_size: Events per call; None is the coordinator's default.
        """
        token = ""
        while True:
            request = _audit_request(action, target, page_size, token)
            with translated_rpc_errors():
                response = await self._admin.ListAuditEvents(request, **self._call_kwargs())
            for event in response.events:
                yield audit_event_from_proto(event)
            token = response.next_page_token
            if not token:
                return

    async def list_audit_events_page(
        self,
        *,
        action: str | None = None,
        target: str | None = None,
        page_size: int | None = None,
        page_token: str = "",
    ) -> tuple[list[AuditEvent], str]:
        """One page of ``list_audit_events`` and the token of the next page (empty on
        the last); ``page_size`` is clamped to the coordinator's maximum page size."""
        request = _audit_request(action, target, page_size, page_token)
        with translated_rpc_errors():
            response = await self._admin.ListAuditEvents(request, **self._call_kwargs())
        return [audit_event_from_proto(e) for e in response.events], response.next_page_token

    # -- recurring schedules (R-18) -------------------------------------------------------

    async def create_schedule(
        self,
        name: str,
        *,
        cron: str,
        timezone: str,
        wire_name: str,
        payload: bytes = b"{}",
        queue: str = "default",
        catch_up: CatchUp | str = CatchUp.SKIP,
    ) -> ScheduleInfo:
        """Creates a recurring schedule: each tick of ``cron`` in ``timezone`` enqueues one
        job (``wire_name``, ``payload``, ``queue``), once whatever the number of
        coordinator replicas. Needs the ``manage`` scope.

        Args:
            name: Unique; letters and digits of any script, ``.``, ``_``, ``-``.
            cron: Five fields (minute hour day-of-month month day-of-week), six with a
                leading seconds field, or ``@hourly``, ``@daily``, ``@weekly``,
                ``@monthly``, ``@yearly``.
            timezone: An IANA time zone name, e.g. ``Europe/Berlin`` or ``UTC``. A local
                time that does not exist (DST) is skipped; one that happens twice runs once.
            wire_name: The job type of the jobs it enqueues.
            payload: Their payload as the worker decodes it (UTF-8 JSON for SDK workers).
            queue: Their queue.
            catch_up: Ticks missed while no coordinator ran: ``skip`` them (recorded,
                not run) or ``run_once`` (one job for the whole gap).

        Raises:
            ArgumentError: A value is invalid (``field_violations`` names it: ``cron``,
                ``timezone``, ...); nothing was created.
            AlreadyExists: A schedule of this name exists.
        """
        request = create_schedule_request(
            name,
            cron=cron,
            timezone=timezone,
            wire_name=wire_name,
            payload=payload,
            queue=queue,
            catch_up=catch_up,
        )
        with translated_rpc_errors():
            response = await self._admin.CreateSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    async def list_schedules(self, *, page_size: int | None = None) -> AsyncIterator[ScheduleInfo]:
        """Yields the schedules by name, each with its next runs and newest skipped
        ticks, fetching pages as needed. Needs the ``read`` scope."""
        token = ""
        while True:
            request = admin_service_pb2.ListSchedulesRequest(page_size=page_size or 0, page_token=token)
            with translated_rpc_errors():
                response = await self._admin.ListSchedules(request, **self._call_kwargs())
            for schedule in response.schedules:
                yield schedule_from_proto(schedule)
            token = response.next_page_token
            if not token:
                return

    async def pause_schedule(self, name: str) -> ScheduleInfo:
        """Stops enqueueing the schedule's ticks until it is resumed (``manage``).

        Raises:
            JobNotFound: There is no such schedule (NOT_FOUND, reason ``SCHEDULE_NOT_FOUND``).
        """
        request = admin_service_pb2.PauseScheduleRequest(name=schedule_name(name))
        with translated_rpc_errors():
            response = await self._admin.PauseSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    async def resume_schedule(self, name: str) -> ScheduleInfo:
        """Enqueues the schedule's ticks again from the first after now; those while it
        was paused are not run (``manage``).

        Raises:
            JobNotFound: There is no such schedule (NOT_FOUND, reason ``SCHEDULE_NOT_FOUND``).
        """
        request = admin_service_pb2.ResumeScheduleRequest(name=schedule_name(name))
        with translated_rpc_errors():
            response = await self._admin.ResumeSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    async def delete_schedule(self, name: str) -> ScheduleInfo:
        """Deletes the schedule and returns it as it was; the jobs it enqueued stay
        (``manage``).

        Raises:
            JobNotFound: There is no such schedule (NOT_FOUND, reason ``SCHEDULE_NOT_FOUND``).
        """
        request = admin_service_pb2.DeleteScheduleRequest(name=schedule_name(name))
        with translated_rpc_errors():
            response = await self._admin.DeleteSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    async def purge_jobs(self, state: JobState | str, older_than: timedelta) -> int:
        """Removes now the jobs in ``state`` that finished more than ``older_than`` ago,
        with their attempts and history, as retention does (R-19); returns how many.

        Children keep their copies of a purged parent's output. The purge is audited
        (``jobs.purge``).

        Args:
            state: ``succeeded``, ``failed`` or ``cancelled``.
            older_than: How long ago a job must have finished, whole milliseconds;
                ``timedelta(0)`` purges every job of the state finished by now.

        Raises:
            ArgumentError: A state that is not terminal, or a negative ``older_than``
                (INVALID_ARGUMENT naming the field); nothing was removed.
            PermissionDenied: This client's token lacks ``admin``.
        """
        request = _purge_request(state, older_than)
        with translated_rpc_errors():
            response = await self._admin.PurgeJobs(request, **self._call_kwargs())
        return int(response.purged)


class AdminCalls(ClientBase):
    """The admin calls of ``Client``: the blocking twins of ``AsyncAdminCalls``."""

    _admin: Any
    """The AdminService stub on the client's channel."""

    def create_token(self, name: str, scopes: Sequence[str], *, queues: Sequence[str] = ()) -> CreatedToken:
        """Creates an API token; see ``AsyncClient.create_token``."""
        request = _create_request(name, scopes, queues)
        with translated_rpc_errors():
            response = self._admin.CreateToken(request, **self._call_kwargs())
        return created_token_from_proto(response)

    def list_tokens(self, *, include_revoked: bool = False) -> list[TokenInfo]:
        """Returns the tokens, oldest first; see ``AsyncClient.list_tokens``."""
        request = admin_service_pb2.ListTokensRequest(include_revoked=bool(include_revoked))
        with translated_rpc_errors():
            response = self._admin.ListTokens(request, **self._call_kwargs())
        return [token_from_proto(token) for token in response.tokens]

    def revoke_token(self, token_id: str) -> TokenInfo:
        """Revokes a token at once; see ``AsyncClient.revoke_token``."""
        request = admin_service_pb2.RevokeTokenRequest(id=check_id("token_id", token_id))
        with translated_rpc_errors():
            response = self._admin.RevokeToken(request, **self._call_kwargs())
        return token_from_proto(response.token)

    def list_audit_events(
        self, *, action: str | None = None, target: str | None = None, page_size: int | None = None
    ) -> Iterator[AuditEvent]:
        """Yields audit events, newest first; see ``AsyncClient.list_audit_events``."""
        token = ""
        while True:
            request = _audit_request(action, target, page_size, token)
            with translated_rpc_errors():
                response = self._admin.ListAuditEvents(request, **self._call_kwargs())
            for event in response.events:
                yield audit_event_from_proto(event)
            token = response.next_page_token
            if not token:
                return

    def list_audit_events_page(
        self,
        *,
        action: str | None = None,
        target: str | None = None,
        page_size: int | None = None,
        page_token: str = "",
    ) -> tuple[list[AuditEvent], str]:
        """One page of audit events and the next page's token (empty on the last);
        see ``AsyncClient.list_audit_events_page``."""
        request = _audit_request(action, target, page_size, page_token)
        with translated_rpc_errors():
            response = self._admin.ListAuditEvents(request, **self._call_kwargs())
        return [audit_event_from_proto(e) for e in response.events], response.next_page_token

    # -- recurring schedules (R-18) -------------------------------------------------------

    def create_schedule(
        self,
        name: str,
        *,
        cron: str,
        timezone: str,
        wire_name: str,
        payload: bytes = b"{}",
        queue: str = "default",
        catch_up: CatchUp | str = CatchUp.SKIP,
    ) -> ScheduleInfo:
        """Creates a recurring schedule; see ``AsyncClient.create_schedule``."""
        request = create_schedule_request(
            name,
            cron=cron,
            timezone=timezone,
            wire_name=wire_name,
            payload=payload,
            queue=queue,
            catch_up=catch_up,
        )
        with translated_rpc_errors():
            response = self._admin.CreateSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    def list_schedules(self, *, page_size: int | None = None) -> Iterator[ScheduleInfo]:
        """Yields the schedules by name; see ``AsyncClient.list_schedules``."""
        token = ""
        while True:
            request = admin_service_pb2.ListSchedulesRequest(page_size=page_size or 0, page_token=token)
            with translated_rpc_errors():
                response = self._admin.ListSchedules(request, **self._call_kwargs())
            for schedule in response.schedules:
                yield schedule_from_proto(schedule)
            token = response.next_page_token
            if not token:
                return

    def pause_schedule(self, name: str) -> ScheduleInfo:
        """Pauses the schedule; see ``AsyncClient.pause_schedule``."""
        request = admin_service_pb2.PauseScheduleRequest(name=schedule_name(name))
        with translated_rpc_errors():
            response = self._admin.PauseSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    def resume_schedule(self, name: str) -> ScheduleInfo:
        """Resumes the schedule; see ``AsyncClient.resume_schedule``."""
        request = admin_service_pb2.ResumeScheduleRequest(name=schedule_name(name))
        with translated_rpc_errors():
            response = self._admin.ResumeSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    def delete_schedule(self, name: str) -> ScheduleInfo:
        """Deletes the schedule; see ``AsyncClient.delete_schedule``."""
        request = admin_service_pb2.DeleteScheduleRequest(name=schedule_name(name))
        with translated_rpc_errors():
            response = self._admin.DeleteSchedule(request, **self._call_kwargs())
        return schedule_from_proto(response.schedule)

    def purge_jobs(self, state: JobState | str, older_than: timedelta) -> int:
        """Removes now the ``state`` jobs that finished more than ``older_than`` ago and
        returns how many; see ``AsyncClient.purge_jobs``."""
        request = _purge_request(state, older_than)
        with translated_rpc_errors():
            response = self._admin.PurgeJobs(request, **self._call_kwargs())
        return int(response.purged)
