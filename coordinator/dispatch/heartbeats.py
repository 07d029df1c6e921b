"""What a heartbeat costs: only the attempts its stream holds.

A worker names every attempt it holds in each heartbeat. Its stream knows most of them
(``WorkerSession.held``: claimed for it, or renewed by an earlier heartbeat); the others
are a reconnecting worker's attempts from its earlier stream, looked up in the store
while the stream's allowance for them lasts (``StreamBounds.unheld_heartbeat_checks``).
Any ID past that is answered lost at once, without store work, so a heartbeat naming
thousands of made-up IDs costs the writer nothing.

Progress reports ride on heartbeats. Only those of attempts that go on to the store
for renewal, and that changed since the report last stored, go with them, into the
heartbeat's own write; the others (those answered lost unread) are dropped here, at
no cost, and the store writes a report only for an attempt it renewed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from coordinator.dispatch.sessions import WorkerSession
from coordinator.service.work import HeartbeatAnswer, HeartbeatRequest


def screen(sessions: Sequence[WorkerSession], requests: list[HeartbeatRequest]) -> list[set[str]]:
    """Leaves in each of ``requests`` (one per session, in place) the IDs the store is
    to renew; returns, for each, the IDs answered lost without a look-up. Set
    operations only: a heartbeat of 10,000 IDs costs the loop well under a millisecond."""
    unread: list[set[str]] = []
    for at, (session, request) in enumerate(zip(sessions, requests, strict=True)):
        named = set(request.attempt_ids)
        unheld = named.difference(session.held)
        lost: set[str] = set()
        if len(unheld) > session.unheld_checks_left:
            looked_up = set(itertools.islice(unheld, session.unheld_checks_left))
            lost = unheld.difference(looked_up)
            named.difference_update(lost)
        session.unheld_checks_left -= len(unheld) - len(lost)
        # In the worker's order unless some are dropped (the store sorts them anyway).
        checked = list(named) if lost else list(request.attempt_ids)
        progress = _changed_progress(session, request.progress, named)
        requests[at] = HeartbeatRequest(checked, request.lease_ms, request.sender, progress)
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
    named = set(request.attempt_ids)
    written = {a: p for a, p in session.progress_written.items() if a in named and a not in lost}
    written.update((a, p) for a, p in request.progress.items() if a not in lost)
    session.progress_written = written
    return answer


def _changed_progress(
    session: WorkerSession, progress: Mapping[str, str], renewing: set[str]
) -> Mapping[str, str]:
    """The reports worth a write: new, of attempts the store is to renew (those the
    stream holds, and a reconnecting worker's that it looks up). The store writes only
    those it does renew."""
    if not progress:
        return progress
    written = session.progress_written
    return {a: p for a, p in progress.items() if a in renewing and written.get(a) != p}
