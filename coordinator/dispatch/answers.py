"""A written batch's answers, routed to the sessions that asked (claims aside: their
credit goes back through ``dispatch.claims.hand_back``)."""

from __future__ import annotations

from coordinator.dispatch import heartbeats
from coordinator.dispatch.collecting import Routes
from coordinator.dispatch.deliveries import CancelNotice
from coordinator.service.work import BatchAnswers, WorkBatch

CANCEL_REASON = "cancelled by request"


def route_answers(answers: BatchAnswers, routes: Routes, batch: WorkBatch) -> None:
    """Puts each start's, heartbeat's and result's answer in its session's outbox, and
    gives back the budget of the releases (which have no answer)."""
    for session, start in zip(routes.starts, answers.starts, strict=True):
        session.deliver(start)
    if routes.joining is not None:  # the starts that joined the transaction
        for session, start in zip(routes.joining.sessions, answers.joined_starts, strict=True):
            session.deliver(start)
    beats = zip(routes.heartbeats, batch.heartbeats, answers.heartbeats, routes.lost_unread, strict=True)
    for session, request, heartbeat, unread in beats:
        session.deliver(heartbeats.answered(session, request, heartbeat, unread))
        for attempt_id in sorted(heartbeat.cancels):  # repeated until the run ends
            session.deliver(CancelNotice(attempt_id, CANCEL_REASON))
    for session, result in zip(routes.results, answers.results, strict=True):
        if result.error is None:  # accepted or stale: the attempt is held no more
            session.held.discard(result.attempt_id)
        session.deliver(result)
    for session in routes.releases:
        session.give_back(1)  # written; releases have no answer
