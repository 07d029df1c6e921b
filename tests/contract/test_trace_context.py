"""A job's W3C trace context on both engines: stored as enqueued and handed to its
claim; a child's claim carries its parents' contexts; a malformed one is refused and
nothing of the batch is written; a parent removed by retention hands on no context."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.errors import InvalidArgument
from worker_sdk.trace_rules import MAX_TRACESTATE_BYTES

from .harness import WIRE, Harness

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


def test_the_trace_context_is_stored_and_claimed_with_the_job(harness: Harness) -> None:
    traced = harness.enqueue(queue="traced", traceparent=TRACEPARENT, tracestate=TRACESTATE)
    untraced = harness.enqueue()
    full_state = harness.enqueue(traceparent=TRACEPARENT, tracestate="k=" + "v" * (MAX_TRACESTATE_BYTES - 2))

    assert (harness.job(traced).traceparent, harness.job(traced).tracestate) == (TRACEPARENT, TRACESTATE)
    assert (harness.job(untraced).traceparent, harness.job(untraced).tracestate) == (None, None)
    assert len(harness.job(full_state).tracestate or "") == MAX_TRACESTATE_BYTES
    claimed = harness.claim_one(traced)
    assert (claimed.job.traceparent, claimed.job.tracestate) == (TRACEPARENT, TRACESTATE)


def test_an_empty_tracestate_is_stored_as_none(harness: Harness) -> None:
    job_id = harness.enqueue(traceparent=TRACEPARENT, tracestate=None)
    assert (harness.job(job_id).traceparent, harness.job(job_id).tracestate) == (TRACEPARENT, None)


@pytest.mark.parametrize(
    ("traceparent", "tracestate", "message"),
    [
        (TRACEPARENT[:-1], None, "exactly 55 characters"),
        (TRACEPARENT.upper(), None, "lowercase hex"),
        ("ff" + TRACEPARENT[2:], None, "version ff"),
        ("00-" + "0" * 32 + TRACEPARENT[35:], None, "all zeros"),
        (TRACEPARENT[:36] + "0" * 16 + "-01", None, "all zeros"),
        (TRACEPARENT, "k=" + "v" * MAX_TRACESTATE_BYTES, "at most 512 bytes"),
        (TRACEPARENT, "k=v\n", "printable ASCII"),
        (TRACEPARENT, "k=é", "printable ASCII"),
        (None, TRACESTATE, "exactly 55 characters"),
        ("", None, "exactly 55 characters"),
    ],
)
def test_a_malformed_trace_context_is_refused_and_nothing_is_written(
    harness: Harness, traceparent: str | None, tracestate: str | None, message: str
) -> None:
    good = NewJobSpec(WIRE, b"{}")
    bad = NewJobSpec(WIRE, b"{}", traceparent=traceparent, tracestate=tracestate)
    with pytest.raises(InvalidArgument, match=message) as refused:
        harness.enqueue_specs([good, bad])
    assert (refused.value.field, refused.value.reason) == ("jobs[1].trace_context", "TRACE_CONTEXT_INVALID")
    assert harness.count_jobs() == 0


def _succeed(harness: Harness, job_id: str) -> None:
    claimed = harness.run(job_id)
    assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=b"out").accepted


def test_a_childs_claim_carries_its_parents_trace_contexts(harness: Harness) -> None:
    # Each job in a queue of its own, so that each claim takes the job it names.
    traced = harness.enqueue(queue="a", traceparent=TRACEPARENT, tracestate=TRACESTATE)
    other = harness.enqueue(queue="b", traceparent=OTHER_TRACEPARENT)
    untraced = harness.enqueue(queue="c")
    child = harness.enqueue(queue="d", parent_ids=(traced, other, untraced), traceparent=TRACEPARENT)
    for parent in (traced, other, untraced):
        _succeed(harness, parent)

    claimed = harness.claim_one(child)

    assert dict(claimed.parent_outputs) == {traced: b"out", other: b"out", untraced: b"out"}
    assert dict(claimed.parent_trace_contexts) == {
        traced: (TRACEPARENT, TRACESTATE),
        other: (OTHER_TRACEPARENT, None),
    }


def test_a_parent_removed_by_retention_hands_on_its_output_without_a_context(harness: Harness) -> None:
    parent = harness.enqueue(queue="p", traceparent=TRACEPARENT)
    child = harness.enqueue(queue="c", parent_ids=(parent,))
    _succeed(harness, parent)
    engine = create_engine(harness.store.url, poolclass=NullPool)
    with engine.begin() as conn:  # as retention purges it
        conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": parent})
    engine.dispose()

    claimed = harness.claim_one(child)

    assert dict(claimed.parent_outputs) == {parent: b"out"}
    assert dict(claimed.parent_trace_contexts) == {}
