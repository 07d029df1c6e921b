"""A start that arrives after its claim's lease lapsed, before lease expiry ran.

R-4: a claim whose lease lapses before start costs nothing. The coordinator grants such
a start (``decide_start`` does not look at the lease), charges the execution, and leaves
the lapsed deadline as it was: the next expiry pass then ends the run it has just
authorized ``abandoned`` (R-5), one execution spent, the job retried while the worker
still runs the handler (it hears ``lost`` at its next heartbeat: a heartbeat past the
deadline renews nothing, R-10, whether expiry has run or not). The window is the
maintenance interval after the deadline (1 s by default): a worker that stalled past
its lease and then starts.

Either answer would keep R-4: refuse the start (the claim then lapses unstarted, free),
or grant it with a fresh lease. The test accepts both. (A fresh lease written with the
start must not undo a heartbeat's renewal in the same batch: starts are gathered before
the batch's heartbeats renew leases, and the state machine checks a start never
shortens a lease.)
"""

from __future__ import annotations

from coordinator.domain.states import JobState, Outcome
from coordinator.scheduler.leases import expire_leases

from .harness import Harness

LEASE_MS = 1_000


def test_r4_a_start_after_the_lease_lapsed_is_refused_or_gets_a_fresh_lease(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id, lease_ms=LEASE_MS)
    harness.clock.advance(LEASE_MS + 1)  # the deadline passed; the maintenance loop has not run

    answer = harness.start(claimed.attempt_id)
    expire_leases(harness.ops)

    job = harness.job(job_id)
    [attempt] = harness.attempts(job_id)
    if answer.granted:  # the run it authorized goes on under a lease of its own
        assert job.state is JobState.RUNNING
        assert job.lease_expires_at_ms is not None and job.lease_expires_at_ms > harness.clock.now_ms()
    else:  # the claim lapsed unstarted: no execution charged
        assert (attempt.outcome, job.executions, job.unstarted_streak) == (Outcome.UNSTARTED_ABANDONED, 0, 1)


def test_r10_a_heartbeat_after_the_lease_lapsed_is_answered_lost_and_renews_nothing(
    harness: Harness,
) -> None:
    """Found by the chaos runs: a worker that stalled past its lease and heartbeated before
    expiry ran had its lapsed lease renewed, so whether the job was retried depended on
    which came first. Lapsed is lapsed: the heartbeat hears ``lost`` and expiry then
    recovers the attempt as it would have anyway."""
    job_id = harness.enqueue()
    claimed = harness.run(job_id, lease_ms=LEASE_MS)
    harness.clock.advance(LEASE_MS)  # exactly at the deadline: expiry would take it now

    lost, _ = harness.heartbeat([claimed.attempt_id])
    assert lost == {claimed.attempt_id}
    assert harness.job(job_id).lease_expires_at_ms == harness.clock.now_ms()  # unchanged

    expire_leases(harness.ops)
    job = harness.job(job_id)
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, job.state) == (Outcome.ABANDONED, JobState.SCHEDULED)  # its retry


def test_r10_a_heartbeat_before_the_deadline_still_renews(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id, lease_ms=LEASE_MS)
    harness.clock.advance(LEASE_MS - 1)

    lost, lease_until = harness.heartbeat([claimed.attempt_id], lease_ms=LEASE_MS)
    assert lost == set()
    assert harness.job(job_id).lease_expires_at_ms == lease_until == harness.clock.now_ms() + LEASE_MS
