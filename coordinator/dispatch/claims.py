"""A session's credit on its way through a claim, and back.

Every claim (made in a batch, with the enqueue calls that batch writes, if any) goes the
same way through the fields of the session it is made for (``WorkerSession``):

- credit arrives (``add_credit``): ``credit`` grows, never past the capacity less what
  is ``reserved``;
- a claim is asked for (``reserve``): the ``credit`` it asks for (``claim_count``: all,
  or all but one outside an enqueue's batch once a claim ran dry) moves to
  ``reserved``, and
  ``claim_may_be_stale`` is cleared (this claim reads later);
- work is heard of (``hear_of_work``): ``drained`` is cleared, and
  ``claim_may_be_stale`` set while a claim is out;
- the claim is answered (``hand_back``): ``reserved`` gives back what it asked, and
  ``credit`` gets what the claim did not use; ``drained`` is set from the answer and
  ``claim_may_be_stale`` cleared.

Only this module changes those four fields (and ``ran_dry``, set from each answer);
``hand_back`` also hands the claimed jobs to the session as assignments, once their
transaction has committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from coordinator.dispatch.sessions import WorkerSession
from coordinator.domain.bounds import StoreBounds
from coordinator.service.work import BatchAnswers, ClaimRequest


def add_credit(session: WorkerSession, count: int) -> None:
    """The worker is ready for ``count`` more jobs (never past its capacity)."""
    session.credit = min(session.credit + max(count, 0), session.capacity - session.reserved)


def with_credit(sessions: Iterable[WorkerSession]) -> list[WorkerSession]:
    """The sessions a claim may be made for: credit left, not draining, wire names to
    ask for."""
    return [s for s in sessions if s.credit > 0 and not s.draining and s.wire_names]


def claim_count(session: WorkerSession, *, with_enqueues: bool) -> int:
    """How much of ``session``'s credit a claim asks for: all of it, but one less in a
    batch without enqueue calls when its last claim ran dry (a light load) and that
    leaves some or a claim is out. That one is kept for the next enqueue's own claim,
    which otherwise found every credit set aside at a light load (a claim made after a
    result, or again after a stale one): its job then waited for a claim round of its
    own after its commit, and that round for the next enqueue in turn. While claims
    take all they ask for, nothing is kept: kept back there, the credit made a one-job
    claim round after every such claim (processing throughput fell by a third or more
    on both engines, benchmarks/LOG.md 2026-12-07)."""
    if with_enqueues or not session.ran_dry or (session.credit <= 1 and not session.reserved):
        return session.credit
    return session.credit - 1


def reserve(session: WorkerSession, count: int) -> ClaimRequest:
    """A claim for ``count`` of ``session``'s credit, which is set aside (``reserved``)
    until the claim is answered (``hand_back``): another claim must not spend it too.
    This claim reads after any claim still out for the session, so whether that one
    read too early (``claim_may_be_stale``) matters no more: this one sees what it
    missed, or is made again (``Dispatcher._write``)."""
    request = ClaimRequest(
        session.worker_id,
        session.queues,
        session.wire_names,
        count,
        session.lease_ms,
        token_id=session.token_id,
        token_queues=session.token_queues,
    )
    session.reserved += count
    session.credit -= count
    session.claim_may_be_stale = False
    return request


def hear_of_work(sessions: Iterable[WorkerSession], queues: AbstractSet[str] | None = None) -> None:
    """Jobs may have become claimable (in ``queues``; None: anywhere): every session
    taking from them may claim again, and one whose claim is out may have read before
    that work committed (PostgreSQL writes batches and enqueues at once), so it claims
    again once the credit is back."""
    for session in sessions:
        if queues is not None and queues.isdisjoint(session.queues):
            continue
        session.drained = False
        if session.reserved:
            session.claim_may_be_stale = True


def hand_back(
    sessions: Sequence[WorkerSession],
    requests: Sequence[ClaimRequest],
    answers: BatchAnswers,
    *,
    connected: AbstractSet[WorkerSession],
    bounds: StoreBounds,
) -> bool:
    """Hands each session (still ``connected``) the jobs claimed for it, unless they went
    out before the commit (``BatchAnswers.handed_out_early``), and gives back the credit
    not used. Returns whether another claim round is wanted at once: a
    session whose claim took all it could (all it asked for, or ``max_claim_batch``,
    the most one claim takes) and that has credit left may find more, and so may one
    that work may have become claimable for while its claim was out."""
    refill = False
    drained = answers.drained or [False] * len(requests)
    for session, request, claimed, empty in zip(sessions, requests, answers.claims, drained, strict=True):
        session.reserved -= request.count
        session.credit += request.count - len(claimed)
        if claimed and session in connected and not answers.handed_out_early:
            session.assign(tuple(claimed))
        took_all_it_could = len(claimed) == bounds.clamp_claim_batch(request.count)
        session.ran_dry = not took_all_it_could
        missed_work = session.claim_may_be_stale
        session.claim_may_be_stale = False
        session.drained = empty and not missed_work
        refill = refill or ((took_all_it_could or missed_work) and session.credit > 0)
    return refill


class Turns:
    """Which session a claim round asks first. A round's claims take jobs in the order
    of their requests, so without turns the same session would get every job of a
    light load while the others wait: all of it on one worker process."""

    __slots__ = ("_rounds",)

    def __init__(self) -> None:
        self._rounds = 0

    def order(self, sessions: list[WorkerSession]) -> list[WorkerSession]:
        """``sessions`` starting with the next one in turn."""
        if len(sessions) < 2:
            return sessions
        first = self._rounds % len(sessions)
        self._rounds += 1
        return sessions[first:] + sessions[:first]
