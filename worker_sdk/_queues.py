"""The queue calls of ``AsyncClient`` and ``Client`` (R-17): list queues with their
counts (a page at a time), get one, pause and resume them, set their concurrency limits and
delete empty ones. Listing and getting need the ``read`` scope, changes ``manage``, deleting
``admin``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from worker_sdk._client_base import ClientBase
from worker_sdk._convert import state_from_proto
from worker_sdk._errors import ArgumentError, translated_rpc_errors
from worker_sdk._info import JobState
from worker_sdk.proto.runwick.v1 import queue_pb2


@dataclass(frozen=True)
class QueueInfo:
    """A queue and its controls. What is marked ``list_queues`` only (``counts`` and
    ``oldest_available_age`` too) is filled by ``list_queues`` and ``get_queue``, not by
    the answers of the changes; ``held_back`` and ``runnable`` by ``get_queue`` only."""

    name: str
    paused: bool
    concurrency_limit: int | None
    """Most of its jobs reserved or running at once, across every worker; None: no limit."""
    counts: dict[JobState, int] = field(default_factory=dict)
    """Jobs per state."""
    oldest_available_age: timedelta | None = None
    """How long the oldest due job has waited; None when none is due."""
    key_limit: int | None = None
    """Most jobs of one concurrency key reserved or running at once, across every
    worker; None: no per-key limit (docs/flow-control.md)."""
    active_keys: int | None = None
    """``list_queues`` only, with a per-key limit or rate: keys with jobs reserved or
    running."""
    keys_at_limit: int | None = None
    """``list_queues`` only, with a per-key limit: those of them at the limit."""
    rate: QueueRateInfo | None = None
    """At most so many starts of its jobs per period; None: no rate."""
    keys_at_rate: int | None = None
    """``list_queues`` only, with a per-key rate: keys whose window is full now."""
    first_keys_at_limit: tuple[str, ...] = ()
    """``list_queues`` only: the first keys at the limit (at most 5, in order)."""
    first_keys_at_rate: tuple[str, ...] = ()
    """``list_queues`` only: the first keys whose rate window is full (at most 5)."""
    held_back: dict[str, int] = field(default_factory=dict)
    """``get_queue`` only: its available jobs each of its controls holds back now, by
    kind (``queue_paused``, ``queue_limit``, ``key_limit``, ``rate``; one entry per
    control the queue has, in the claim's order; docs/flow-control.md)."""
    runnable: int | None = None
    """``get_queue`` only: of its available jobs, those no control holds back now."""


@dataclass(frozen=True)
class QueueRateInfo:
    """A queue's rate limit: at most ``count`` starts per ``period``, for the queue as a
    whole or for each concurrency key (``per_key``)."""

    count: int
    period: timedelta
    per_key: bool = False


def queue_from_proto(message: queue_pb2.Queue) -> QueueInfo:
    counts = {state_from_proto(c.state): int(c.count) for c in message.counts}
    age = message.oldest_available_age.ToTimedelta() if message.HasField("oldest_available_age") else None
    limit = message.concurrency_limit if message.HasField("concurrency_limit") else None
    key_limit = message.key_limit if message.HasField("key_limit") else None
    active = message.active_keys if message.HasField("active_keys") else None
    at_limit = message.keys_at_limit if message.HasField("keys_at_limit") else None
    rate = None
    if message.HasField("rate"):
        rate = QueueRateInfo(message.rate.count, message.rate.period.ToTimedelta(), message.rate.per_key)
    at_rate = message.keys_at_rate if message.HasField("keys_at_rate") else None
    return QueueInfo(
        message.name,
        message.paused,
        limit,
        counts,
        age,
        key_limit,
        active,
        at_limit,
        rate,
        keys_at_rate=at_rate,
        first_keys_at_limit=tuple(message.first_keys_at_limit),
        first_keys_at_rate=tuple(message.first_keys_at_rate),
        held_back={held.kind: int(held.count) for held in message.held_back},
        runnable=int(message.runnable) if message.HasField("runnable") else None,
    )


def _name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ArgumentError("queue must be a non-empty str")
    return name


def _page_request(page_size: int | None, page_token: str) -> queue_pb2.ListQueuesRequest:
    whole = isinstance(page_size, int) and not isinstance(page_size, bool)
    if page_size is not None and (not whole or page_size < 1):
        raise ArgumentError(f"page_size must be an int of 1 or more, or None; got {page_size!r}")
    if not isinstance(page_token, str):
        raise ArgumentError(f"page_token must be a str, got {type(page_token).__name__}")
    return queue_pb2.ListQueuesRequest(page_size=page_size or 0, page_token=page_token)


def _page(response: queue_pb2.ListQueuesResponse) -> tuple[list[QueueInfo], str]:
    return [queue_from_proto(q) for q in response.queues], response.next_page_token


def _limit_request(name: str, limit: int | None) -> queue_pb2.SetQueueLimitRequest:
    request = queue_pb2.SetQueueLimitRequest(name=_name(name))
    if limit is not None:
        request.limit = _limit(limit)
    return request


def _key_limit_request(name: str, limit: int | None) -> queue_pb2.SetQueueKeyLimitRequest:
    request = queue_pb2.SetQueueKeyLimitRequest(name=_name(name))
    if limit is not None:
        request.limit = _limit(limit)
    return request


def _limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ArgumentError(f"limit must be an int or None, got {type(limit).__name__}")
    return limit


def _rate_request(
    name: str, count: int | None, per_seconds: float | timedelta | None, per_key: bool
) -> queue_pb2.SetQueueRateRequest:
    request = queue_pb2.SetQueueRateRequest(name=_name(name))
    if count is None:
        return request
    if isinstance(count, bool) or not isinstance(count, int):
        raise ArgumentError(f"count must be an int or None, got {type(count).__name__}")
    if isinstance(per_seconds, timedelta):
        per_seconds = per_seconds.total_seconds()
    if isinstance(per_seconds, bool) or not isinstance(per_seconds, int | float) or not per_seconds > 0:
        raise ArgumentError(f"per_seconds must be a number of seconds above 0, got {per_seconds!r}")
    if per_seconds > MAX_RATE_PERIOD_S:
        raise ArgumentError(f"per_seconds must be at most {MAX_RATE_PERIOD_S} (7 days), got {per_seconds!r}")
    if not isinstance(per_key, bool):
        raise ArgumentError(f"per_key must be a bool, got {type(per_key).__name__}")
    request.rate.count = count
    request.rate.period.FromMilliseconds(round(per_seconds * 1000))
    request.rate.per_key = per_key
    return request


MAX_RATE_PERIOD_S = 7 * 86_400
"""The longest period a rate may have (the coordinator refuses longer ones too)."""


class AsyncQueueCalls(ClientBase):
    """The queue calls of ``AsyncClient``."""

    _admin: Any

    async def list_queues(self, *, page_size: int | None = None) -> list[QueueInfo]:
        """Every known queue, in natural order (cq2 before cq10), with its controls and
        counts, fetched a page at a
        time (the coordinator bounds how many queues there are: ``max_queues``)."""
        queues: list[QueueInfo] = []
        token = ""
        while True:
            page, token = await self.list_queues_page(page_size=page_size, page_token=token)
            queues += page
            if not token:
                return queues

    async def list_queues_page(
        self, *, page_size: int | None = None, page_token: str = ""
    ) -> tuple[list[QueueInfo], str]:
        """One page of queues (natural order) and the next page's token (empty on the last).
        ``page_size`` is clamped to the coordinator's maximum page size.

        Raises:
            ArgumentError: A malformed ``page_token`` (``PAGE_TOKEN_INVALID``).
        """
        request = _page_request(page_size, page_token)
        with translated_rpc_errors():
            response = await self._admin.ListQueues(request, **self._call_kwargs())
        return _page(response)

    async def get_queue(self, name: str) -> QueueInfo:
        """One queue with its controls, counts and keys, as ``list_queues`` gives it, and
        what each of its controls holds back now (``held_back``, ``runnable``).

        Raises:
            ArgumentError: The name is not a queue name (``NAME_INVALID``, ...).
            JobNotFound: There is no such queue (``QUEUE_NOT_FOUND``).
        """
        request = queue_pb2.GetQueueRequest(name=_name(name))
        with translated_rpc_errors():
            response = await self._admin.GetQueue(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    async def delete_queue(self, name: str) -> QueueInfo:
        """Deletes a queue that holds no jobs, with its controls; returns it as it was.
        The next enqueue to the name makes it again. Needs ``admin``; audited.

        Raises:
            FailedPrecondition: The queue still holds jobs (``QUEUE_NOT_EMPTY``; its
                metadata counts them); nothing changed.
            JobNotFound: There is no such queue (``QUEUE_NOT_FOUND``).
        """
        request = queue_pb2.DeleteQueueRequest(name=_name(name))
        with translated_rpc_errors():
            response = await self._admin.DeleteQueue(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    async def pause_queue(self, name: str) -> QueueInfo:
        """Stops new claims of the queue's jobs; running ones finish. Audited.

        Raises:
            JobNotFound: No job was ever enqueued to that queue.
        """
        request = queue_pb2.PauseQueueRequest(name=_name(name))
        with translated_rpc_errors():
            response = await self._admin.PauseQueue(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    async def resume_queue(self, name: str) -> QueueInfo:
        """Lets workers claim the queue's jobs again. Audited."""
        request = queue_pb2.ResumeQueueRequest(name=_name(name))
        with translated_rpc_errors():
            response = await self._admin.ResumeQueue(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    async def set_queue_limit(self, name: str, limit: int | None) -> QueueInfo:
        """At most ``limit`` (1 or more) of the queue's jobs reserved or running at once,
        across every worker and coordinator replica; None removes the limit. Audited.

        Raises:
            ArgumentError: The limit is below 1.
        """
        request = _limit_request(name, limit)
        with translated_rpc_errors():
            response = await self._admin.SetQueueLimit(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    async def set_queue_key_limit(self, name: str, limit: int | None) -> QueueInfo:
        """At most ``limit`` (1 or more) jobs of one concurrency key of the queue reserved
        or running at once, across every worker and coordinator replica; None removes
        it. It holds together with the queue's own limit. Audited
        (docs/flow-control.md).

        Raises:
            ArgumentError: The limit is below 1.
            JobNotFound: There is no such queue (``QUEUE_NOT_FOUND``).
        """
        request = _key_limit_request(name, limit)
        with translated_rpc_errors():
            response = await self._admin.SetQueueKeyLimit(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    async def set_queue_rate(
        self,
        name: str,
        count: int | None,
        per_seconds: float | timedelta | None = None,
        *,
        per_key: bool = False,
    ) -> QueueInfo:
        """At most ``count`` starts of the queue's jobs in any window of ``per_seconds``
        (of each concurrency key's jobs with ``per_key``), across every worker and
        coordinator replica; a ``count`` of None removes the rate. Audited.

        Raises:
            ArgumentError: The count is not an int, or the period is not above 0 and at
                most 7 days (the coordinator also refuses a count outside 1 to 1,000,000).
        """
        request = _rate_request(name, count, per_seconds, per_key)
        with translated_rpc_errors():
            response = await self._admin.SetQueueRate(request, **self._call_kwargs())
        return queue_from_proto(response.queue)


class QueueCalls(ClientBase):
    """The queue calls of ``Client``; see ``AsyncClient`` for each."""

    _admin: Any

    def list_queues(self, *, page_size: int | None = None) -> list[QueueInfo]:
        """Every known queue, in natural order, a page at a time; see ``AsyncClient.list_queues``."""
        queues: list[QueueInfo] = []
        token = ""
        while True:
            page, token = self.list_queues_page(page_size=page_size, page_token=token)
            queues += page
            if not token:
                return queues

    def list_queues_page(
        self, *, page_size: int | None = None, page_token: str = ""
    ) -> tuple[list[QueueInfo], str]:
        """One page of queues and the next page's token; see ``AsyncClient.list_queues_page``."""
        request = _page_request(page_size, page_token)
        with translated_rpc_errors():
            response = self._admin.ListQueues(request, **self._call_kwargs())
        return _page(response)

    def get_queue(self, name: str) -> QueueInfo:
        """One queue with what its controls hold back; see ``AsyncClient.get_queue``."""
        request = queue_pb2.GetQueueRequest(name=_name(name))
        with translated_rpc_errors():
            response = self._admin.GetQueue(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    def delete_queue(self, name: str) -> QueueInfo:
        """Deletes a queue that holds no jobs; see ``AsyncClient.delete_queue``."""
        request = queue_pb2.DeleteQueueRequest(name=_name(name))
        with translated_rpc_errors():
            response = self._admin.DeleteQueue(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    def pause_queue(self, name: str) -> QueueInfo:
        """Stops new claims of the queue's jobs; see ``AsyncClient.pause_queue``."""
        with translated_rpc_errors():
            response = self._admin.PauseQueue(
                queue_pb2.PauseQueueRequest(name=_name(name)), **self._call_kwargs()
            )
        return queue_from_proto(response.queue)

    def resume_queue(self, name: str) -> QueueInfo:
        """Lets workers claim the queue's jobs again; see ``AsyncClient.resume_queue``."""
        with translated_rpc_errors():
            response = self._admin.ResumeQueue(
                queue_pb2.ResumeQueueRequest(name=_name(name)), **self._call_kwargs()
            )
        return queue_from_proto(response.queue)

    def set_queue_limit(self, name: str, limit: int | None) -> QueueInfo:
        """Caps the queue's jobs reserved or running at once; see ``AsyncClient.set_queue_limit``."""
        request = _limit_request(name, limit)
        with translated_rpc_errors():
            response = self._admin.SetQueueLimit(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    def set_queue_key_limit(self, name: str, limit: int | None) -> QueueInfo:
        """Caps each concurrency key's jobs reserved or running at once; see
        ``AsyncClient.set_queue_key_limit``."""
        request = _key_limit_request(name, limit)
        with translated_rpc_errors():
            response = self._admin.SetQueueKeyLimit(request, **self._call_kwargs())
        return queue_from_proto(response.queue)

    def set_queue_rate(
        self,
        name: str,
        count: int | None,
        per_seconds: float | timedelta | None = None,
        *,
        per_key: bool = False,
    ) -> QueueInfo:
        """Caps the queue's starts per period; see ``AsyncClient.set_queue_rate``."""
        request = _rate_request(name, count, per_seconds, per_key)
        with translated_rpc_errors():
            response = self._admin.SetQueueRate(request, **self._call_kwargs())
        return queue_from_proto(response.queue)
