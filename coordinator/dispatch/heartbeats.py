"""What a heartbeat costs: only the attempts its stream holds.

A worker names every attempt it holds in each heartbeat. Its stream knows most of them
(``WorkerSession.held``: claimed for it, or renewed by an earlier heartbeat); the others
are a reconnecting worker's attempts from its earlier stream, looked up in the store
while the stream's allowance for them lasts (``StreamBounds.unheld_heartbeat_checks``).
Any ID past that is answered lost at once, without store work, so a heartbeat naming
thousands of made-up IDs costs the writer nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.dispatch.sessions import WorkerSession
from coordinator.service.work import HeartbeatAnswer, HeartbeatRequest


def screen(sessions: Sequence[WorkerSession], requests: list[HeartbeatRequest]) -> list[set[str]]:
    """Leaves in each of ``requests`` (one per session, in place) the IDs the store is
    to renew; returns, for each, the IDs answered lost without a look-up."""
    unread: list[set[str]] = []
    for at, (session, request) in enumerate(zip(sessions, requests, strict=True)):
        held = session.held
        checked: list[str] = []
        lost: set[str] = set()
        for attempt_id in request.attempt_ids:
            if attempt_id in held:
                checked.append(attempt_id)
            elif session.unheld_checks_left > 0:
                session.unheld_checks_left -= 1
                checked.append(attempt_id)
            else:
                lost.add(attempt_id)
        if lost:
            requests[at] = HeartbeatRequest(checked, request.lease_ms, request.sender)
        unread.append(lost)
    return unread


def answered(
    session: WorkerSession, request: HeartbeatRequest, answer: HeartbeatAnswer, unread: set[str]
) -> HeartbeatAnswer:
    """``answer`` with the IDs lost unread added; the attempts it renewed are the
    stream's now (a reconnecting worker's earlier ones), the lost ones no more."""
    held, lost = session.held, answer.lost
    held.update(a for a in request.attempt_ids if a not in lost)
    held.difference_update(lost)
    lost.update(unread)
    return answer
