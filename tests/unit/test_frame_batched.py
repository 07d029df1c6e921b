"""How the coordinator frames a stream's deliveries for a worker that reads batches:
order kept, a heartbeat answer or a drain between batches, and large payloads spread
over several messages so none outgrows a client's default receive limit."""

from __future__ import annotations

from domain_doubles import JOB_RECORD as JOB

from coordinator.api.protocol import MAX_BATCH_PAYLOAD_BYTES, frame, frame_batched
from coordinator.dispatch import Assignments, CancelNotice, DrainNotice
from coordinator.domain.evolve import evolve
from coordinator.domain.states import JobState
from coordinator.service.work import Claimed, HeartbeatAnswer, ResultAnswer, StartAnswer


def _claimed(n: int, payload: bytes = b"{}") -> Claimed:
    job = evolve(JOB, id=f"0190f0a0-0000-7000-8000-{n:012d}", payload=payload, state=JobState.RESERVED)
    return Claimed(job, f"0190f0a0-0000-7000-8000-{n + 500:012d}", 10_000)


def test_items_ready_together_ride_in_one_batch_in_their_order() -> None:
    deliveries = [
        Assignments((_claimed(1), _claimed(2))),
        StartAnswer("a-1", True, 1),
        ResultAnswer("a-2", True, JobState.SUCCEEDED),
        CancelNotice("a-3", "cancelled by request"),
        Assignments((_claimed(3),)),
    ]
    (message,) = list(frame_batched(deliveries))
    batch = message.batch
    assert [a.job_id for a in batch.assignments] == [_claimed(n).job.id for n in (1, 2, 3)]
    assert [a.attempt_id for a in batch.start_answers] == ["a-1"]
    assert [a.attempt_id for a in batch.result_acks] == ["a-2"]
    assert [(c.attempt_id, c.reason) for c in batch.cancels] == [("a-3", "cancelled by request")]
    # Each item is what the single message would carry.
    single = [m.assignment for m in frame(Assignments((_claimed(1),)))]
    assert batch.assignments[0] == single[0]


def test_a_heartbeat_answer_or_a_drain_goes_alone_between_batches() -> None:
    heartbeat = HeartbeatAnswer(lost={"a-9"}, lease_expires_at_ms=5_000)
    deliveries = [StartAnswer("a-1", True, 1), heartbeat, CancelNotice("a-1", "r"), DrainNotice(2.0)]
    kinds = [m.WhichOneof("kind") for m in frame_batched(deliveries)]
    assert kinds == ["batch", "heartbeat_answer", "batch", "drain"]


def test_large_payloads_are_spread_over_several_batches() -> None:
    payload = b"x" * (MAX_BATCH_PAYLOAD_BYTES // 3 + 1)
    claimed = tuple(_claimed(n, payload) for n in range(7))
    messages = list(frame_batched([Assignments(claimed)]))
    sizes = [len(m.batch.assignments) for m in messages]
    assert sizes == [2, 2, 2, 1]
    assert all(m.ByteSize() < 4 << 20 for m in messages)
    ids = [a.job_id for m in messages for a in m.batch.assignments]
    assert ids == [c.job.id for c in claimed]


def test_one_assignment_over_the_cap_still_goes_out_alone() -> None:
    big = _claimed(1, b"x" * (MAX_BATCH_PAYLOAD_BYTES + 10))
    messages = list(frame_batched([Assignments((_claimed(0), big, _claimed(2)))]))
    assert [len(m.batch.assignments) for m in messages] == [1, 1, 1]


def test_nothing_to_frame_sends_nothing() -> None:
    assert list(frame_batched([])) == []
