"""Job dependencies (R-15, R-16) on both engines: a child waits for every parent, is
released in the same transaction as the last parent's success and reads their outputs;
a parent that fails or is cancelled fails its waiting descendants unrun; a retry with
dependents re-opens them; a batch can declare a whole workflow at once."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from coordinator.domain.ids import uuid7
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from coordinator.service.manage import ManagementService
from coordinator.service.work import BatchAnswers, ClaimRequest

from .harness import OPERATOR, SECOND, WIRE, Harness, sent_statements


def _succeed(harness: Harness, job_id: str, output: bytes) -> None:
    claimed = harness.run(job_id)
    assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=output).accepted


def _fail(harness: Harness, job_id: str) -> None:
    claimed = harness.run(job_id)
    assert harness.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE, error_code="Boom").accepted


def test_a_child_waits_for_every_parent_and_reads_their_outputs(harness: Harness) -> None:
    a, b = harness.enqueue(queue="a"), harness.enqueue(queue="b")
    child = harness.enqueue(queue="c", parent_ids=(a, b, a))
    assert harness.job(child).state is JobState.WAITING

    _succeed(harness, a, b"from a")
    assert harness.job(child).state is JobState.WAITING
    assert harness.claim(queues=("c",)) == []
    _succeed(harness, b, b"from b")

    # Released by the last parent's success itself: no maintenance pass has run.
    assert harness.job(child).state is JobState.AVAILABLE
    claimed = harness.claim_one(child)
    assert dict(claimed.parent_outputs) == {a: b"from a", b: b"from b"}
    assert [t["reason"] for t in harness.transitions(child)] == ["enqueued", "parents_succeeded", "claimed"]


def test_a_released_child_with_a_later_run_at_is_scheduled(harness: Harness) -> None:
    parent = harness.enqueue(queue="p")
    later = harness.clock.now_ms() + 60 * SECOND
    child = harness.enqueue(queue="c", parent_ids=(parent,), run_at_ms=later)
    _succeed(harness, parent, b"")
    job = harness.job(child)
    assert (job.state, job.run_at_ms) == (JobState.SCHEDULED, later)


def test_a_failed_parent_fails_its_waiting_descendants_unrun(harness: Harness) -> None:
    parent = harness.enqueue(queue="p")
    child = harness.enqueue(queue="c", parent_ids=(parent,))
    grandchild = harness.enqueue(queue="g", parent_ids=(child,))

    claimed = harness.run(parent)
    answers = harness.ops.process(_result(harness, claimed.attempt_id, Outcome.PERMANENT_FAILURE))

    for job_id in (child, grandchild):
        job = harness.job(job_id)
        assert (job.state, job.last_error_code, job.executions) == (JobState.FAILED, "parent_failed", 0)
        assert harness.attempts(job_id) == []
    assert answers.terminal_job_ids == {parent, child, grandchild}


def test_a_cancelled_parent_fails_its_waiting_children(harness: Harness) -> None:
    parent = harness.enqueue(queue="p")
    child = harness.enqueue(queue="c", parent_ids=(parent,))
    managed = ManagementService(harness.store, harness.clock).cancel(parent, OPERATOR)
    assert managed.effects.terminal_job_ids == {parent, child}
    assert (harness.job(child).state, harness.job(child).last_error_code) == (
        JobState.FAILED,
        "parent_failed",
    )


def test_a_child_with_two_failing_parents_ends_once(harness: Harness) -> None:
    a, b = harness.enqueue(queue="a"), harness.enqueue(queue="b")
    child = harness.enqueue(queue="c", parent_ids=(a, b))
    claimed_a, claimed_b = harness.run(a), harness.run(b)
    batch = _result(harness, claimed_a.attempt_id, Outcome.PERMANENT_FAILURE)
    batch.results += _result(harness, claimed_b.attempt_id, Outcome.PERMANENT_FAILURE).results

    answers = harness.ops.process(batch)

    assert [f.job_id for f in answers.finished].count(child) == 1
    assert [t["to_state"] for t in harness.transitions(child)] == ["waiting", "failed"]


def test_a_retry_with_dependents_reopens_them_and_the_workflow_completes(harness: Harness) -> None:
    manage = ManagementService(harness.store, harness.clock)
    a = harness.enqueue(queue="a")
    b, c = harness.enqueue(queue="b", parent_ids=(a,)), harness.enqueue(queue="c", parent_ids=(a,))
    d = harness.enqueue(queue="d", parent_ids=(b, c))
    _succeed(harness, a, b"a")
    _succeed(harness, c, b"c")
    _fail(harness, b)
    assert harness.job(d).state is JobState.FAILED

    with pytest.raises(FailedPrecondition, match=f"parent {b}") as refused:
        manage.retry(d, OPERATOR)  # its parent is still failed: retry the parent instead
    assert refused.value.reason == "PARENT_NOT_SUCCEEDED"
    alone = manage.retry(b, OPERATOR)
    assert (alone.job.state, alone.reopened) == (JobState.AVAILABLE, ())
    assert harness.job(d).state is JobState.FAILED  # without dependents, D stays failed
    _fail(harness, b)

    retried = manage.retry(b, OPERATOR, include_dependents=True)

    assert retried.reopened == (d,)
    job = harness.job(d)
    assert (job.state, job.generation, job.last_error_code, job.finished_at_ms) == (
        JobState.WAITING,
        2,
        None,
        None,
    )
    _succeed(harness, b, b"b again")
    claimed = harness.claim_one(d)
    assert dict(claimed.parent_outputs) == {b: b"b again", c: b"c"}


def test_a_batch_declares_a_whole_diamond_at_once(harness: Harness) -> None:
    now = harness.clock.now_ms()
    a, b, c, d = (uuid7(now) for _ in range(4))
    specs = [
        NewJobSpec(WIRE, b"d", queue="d", job_id=d, parent_ids=(b, c)),  # children may come first
        NewJobSpec(WIRE, b"b", queue="b", job_id=b, parent_ids=(a,)),
        NewJobSpec(WIRE, b"c", queue="c", job_id=c, parent_ids=(a,)),
        NewJobSpec(WIRE, b"a", queue="a", job_id=a),
    ]

    enqueued = harness.enqueue_specs(specs)

    assert [(e.job_id, e.state) for e in enqueued] == [
        (d, JobState.WAITING),
        (b, JobState.WAITING),
        (c, JobState.WAITING),
        (a, JobState.AVAILABLE),
    ]
    assert harness.store.relatives(a).child_ids == tuple(sorted((b, c)))
    assert harness.store.relatives(d).parent_ids == tuple(sorted((b, c)))


@pytest.mark.parametrize(
    ("make", "error", "reason"),
    [
        (
            lambda ids: [NewJobSpec(WIRE, b"", job_id=ids[0], parent_ids=(ids[0],))],
            InvalidArgument,
            "DEPENDENCY_CYCLE",
        ),
        (
            lambda ids: [
                NewJobSpec(WIRE, b"", job_id=ids[0], parent_ids=(ids[1],)),
                NewJobSpec(WIRE, b"", job_id=ids[1], parent_ids=(ids[2],)),
                NewJobSpec(WIRE, b"", job_id=ids[2], parent_ids=(ids[0],)),
            ],
            InvalidArgument,
            "DEPENDENCY_CYCLE",
        ),
        (lambda ids: [NewJobSpec(WIRE, b"", job_id=ids[0])] * 2, InvalidArgument, "DUPLICATE_JOB_ID"),
        (lambda ids: [NewJobSpec(WIRE, b"", job_id="not-a-uuid")], InvalidArgument, "INVALID_ID"),
        (
            lambda ids: [NewJobSpec(WIRE, b""), NewJobSpec(WIRE, b"", parent_ids=(ids[3],))],
            NotFound,
            "PARENT_NOT_FOUND",
        ),
    ],
)
def test_a_bad_workflow_is_refused_whole(harness: Harness, make, error, reason) -> None:  # type: ignore[no-untyped-def]
    ids = [uuid7(harness.clock.now_ms()) for _ in range(4)]
    before = harness.rows()
    with pytest.raises(error) as refused:
        harness.enqueue_specs(make(ids))
    assert refused.value.reason == reason
    assert harness.rows() == before


def test_a_chosen_id_that_exists_is_refused(harness: Harness) -> None:
    taken = harness.enqueue()
    before = harness.rows()
    with pytest.raises(AlreadyExists) as refused:
        harness.enqueue_specs([NewJobSpec(WIRE, b"", job_id=taken)])
    assert (refused.value.reason, refused.value.metadata["job_id"]) == ("JOB_ID_TAKEN", taken)
    assert harness.rows() == before


def test_a_child_of_a_finished_parent_starts_at_once(harness: Harness) -> None:
    done, broken = harness.enqueue(queue="done"), harness.enqueue(queue="broken")
    _succeed(harness, done, b"ready")
    _fail(harness, broken)

    [ok, failed] = harness.enqueue_specs(
        [NewJobSpec(WIRE, b"", queue="ok", parent_ids=(done,)), NewJobSpec(WIRE, b"", parent_ids=(broken,))]
    )

    assert ok.state is JobState.AVAILABLE
    assert dict(harness.claim_one(ok.job_id).parent_outputs) == {done: b"ready"}
    job = harness.job(failed.job_id)
    assert (failed.state, job.last_error_code, job.finished_at_ms) == (
        JobState.FAILED,
        "parent_failed",
        harness.clock.now_ms(),
    )


def test_a_parents_output_outlives_the_parent(harness: Harness) -> None:
    """Retention may purge a parent: its output, copied on success, stays for the child."""
    parent = harness.enqueue(queue="p")
    other = harness.enqueue(queue="o")
    child = harness.enqueue(queue="c", parent_ids=(parent, other))
    _succeed(harness, parent, b"kept")
    engine = create_engine(harness.store.url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": parent})
    engine.dispose()
    _succeed(harness, other, b"other")

    assert dict(harness.claim_one(child).parent_outputs) == {parent: b"kept", other: b"other"}


def _result(harness: Harness, attempt_id: str, outcome: Outcome):  # type: ignore[no-untyped-def]
    from coordinator.domain.lifecycle import Report
    from coordinator.service.work import ResultReport, WorkBatch

    return WorkBatch(results=[ResultReport(attempt_id, Report(outcome), sender=harness.holder(attempt_id))])


@pytest.mark.perf
def test_an_enqueue_claiming_its_own_new_jobs_reads_parent_outputs_only_for_children(
    harness: Harness,
) -> None:
    """R-16 in an enqueue's own transaction: a new child of a parent that already
    succeeded is claimed with the parent's output; new jobs without parents need no
    read of any (a job gets its parents only when it is inserted)."""
    done = harness.enqueue(queue="ready")
    _succeed(harness, done, b"out")
    claims = [ClaimRequest("w", ("ready",), (WIRE,), 5, 60_000)]

    def enqueue(specs: list[NewJobSpec]) -> tuple[list[Any], BatchAnswers]:
        return harness.enqueue_claiming(specs, claims)

    with sent_statements() as sent:
        _, answers = enqueue([NewJobSpec(WIRE, b"", queue="ready") for _ in range(2)])
    assert [dict(c.parent_outputs) for c in answers.claims[0]] == [{}, {}]
    assert not [sql for sql, _ in sent if "dependencies.parent_output" in sql]

    with sent_statements() as sent:
        [child, _], answers = enqueue(
            [NewJobSpec(WIRE, b"", queue="ready", parent_ids=(done,)), NewJobSpec(WIRE, b"", queue="ready")]
        )
    outputs = {c.job.id: dict(c.parent_outputs) for c in answers.claims[0]}
    assert outputs[child.job_id] == {done: b"out"} and len(outputs) == 2
    assert len([sql for sql, _ in sent if "dependencies.parent_output" in sql]) == 1
