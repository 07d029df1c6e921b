"""The audit log (R-22): reveals, cancels, retries, token, queue and schedule changes and
purges, each with who did it (token ID and name), what, to which target, when and from where.

Events are written by the service that makes the change, in the same transaction, so a
change is never without its event nor an event without its change.
"""

from __future__ import annotations

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor
from coordinator.domain.records import AuditEvent
from coordinator.errors import InvalidArgument
from coordinator.service.paging import decode_audit_token, encode_audit_token
from coordinator.store import Store
from coordinator.validation import check_filter

JOB_CANCEL = "job.cancel"
JOB_RETRY = "job.retry"
ATTEMPT_REVEAL_ERROR = "attempt.reveal_error"
TOKEN_CREATE = "token.create"
TOKEN_REVOKE = "token.revoke"
QUEUE_PAUSE = "queue.pause"
QUEUE_RESUME = "queue.resume"
QUEUE_LIMIT = "queue.limit"
QUEUE_KEY_LIMIT = "queue.key_limit"
QUEUE_RATE = "queue.rate"
QUEUE_DELETE = "queue.delete"
SCHEDULE_CREATE = "schedule.create"
SCHEDULE_PAUSE = "schedule.pause"
SCHEDULE_RESUME = "schedule.resume"
SCHEDULE_DELETE = "schedule.delete"
SCHEDULE_RUN_NOW = "schedule.run_now"
"""One job enqueued from a schedule at once; target is the schedule, detail the job."""
JOBS_PURGE = "jobs.purge"
"""R-19: a purge asked for by an operator; target is the state, detail the cutoff."""


def event(actor: Actor, action: str, target: str, now_ms: int, detail: str | None = None) -> AuditEvent:
    """The event recording ``action`` on ``target`` by ``actor``; ``detail`` says what
    changed and must never carry error text."""
    principal = actor.principal
    return AuditEvent(
        at_ms=now_ms,
        actor_token_id=principal.token_id,
        actor_name=principal.name,
        action=action,
        target=target,
        peer=actor.peer,
        detail=detail,
    )


class AuditLog:
    """Reads the audit log, newest first."""

    def __init__(self, store: Store, config: CoordinatorConfig) -> None:
        self.store = store
        self.config = config

    def list(
        self, *, action: str | None, target: str | None, page_size: int, page_token: str
    ) -> tuple[list[AuditEvent], str]:
        """A page of events and the next page's token ('' at the end); tokens are opaque
        (``service.paging``) and a malformed one is INVALID_ARGUMENT (``PAGE_TOKEN_INVALID``)."""
        if page_size < 0:
            raise InvalidArgument("page_size", "must not be negative")
        check_filter("action", action)
        check_filter("target", target)
        size = min(page_size or self.config.default_page_size, self.config.max_page_size)
        before = decode_audit_token(page_token) if page_token else None
        page = self.store.list_audit_events(action=action, target=target, before_id=before, limit=size + 1)
        if len(page) > size:
            last = page[size - 1].id
            assert last is not None  # events read back from the store have their ID
            return page[:size], encode_audit_token(last)
        return page, ""
