"""How the worker's writer coalesces what it sends into WorkerBatch messages
(``worker_sdk._batching.take_batch``): the order of each kind is kept, anything a batch
cannot carry (a heartbeat, the end of the stream) ends it and comes back to be written
next, credit is summed, and the byte and item caps start a new message."""

from __future__ import annotations

import asyncio

from worker_sdk._batching import MAX_BATCH_BYTES, MAX_BATCH_ITEMS, batchable, take_batch
from worker_sdk.proto.runwick.v1 import job_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

Outbox = asyncio.Queue[pb.ConnectRequest | None]


def start(attempt_id: str) -> pb.ConnectRequest:
    return pb.ConnectRequest(start=pb.StartRequest(attempt_id=attempt_id))


def release(attempt_id: str) -> pb.ConnectRequest:
    return pb.ConnectRequest(release=pb.Release(attempt_id=attempt_id))


def credit(count: int) -> pb.ConnectRequest:
    return pb.ConnectRequest(credit=pb.Credit(count=count))


def result(attempt_id: str, output: bytes = b"", message: str = "", detail: str = "") -> pb.ConnectRequest:
    return pb.ConnectRequest(
        result=pb.Result(
            attempt_id=attempt_id,
            outcome=job_pb2.OUTCOME_SUCCEEDED,
            output=output,
            message=message,
            detail=detail,
        )
    )


def heartbeat(*attempt_ids: str) -> pb.ConnectRequest:
    return pb.ConnectRequest(heartbeat=pb.Heartbeat(attempt_ids=list(attempt_ids)))


def queued(*messages: pb.ConnectRequest | None) -> Outbox:
    outbox: Outbox = asyncio.Queue()
    for message in messages:
        outbox.put_nowait(message)
    return outbox


def drained(outbox: Outbox) -> list[pb.ConnectRequest | None]:
    return [outbox.get_nowait() for _ in range(outbox.qsize())]


def test_every_kind_keeps_its_order_and_credit_is_summed() -> None:
    outbox = queued(
        result("r-1"), start("s-2"), credit(2), release("x-1"), result("r-2"), credit(3), release("x-2")
    )

    message, left = take_batch(start("s-1"), outbox)

    assert message.WhichOneof("kind") == "batch"
    batch = message.batch
    assert [s.attempt_id for s in batch.starts] == ["s-1", "s-2"]
    assert [r.attempt_id for r in batch.results] == ["r-1", "r-2"]
    assert [r.attempt_id for r in batch.releases] == ["x-1", "x-2"]
    assert batch.credit == 5
    assert left == [] and outbox.empty()


def test_a_heartbeat_ends_the_batch_and_is_handed_back_to_go_next() -> None:
    beat = heartbeat("s-1")
    outbox = queued(start("s-2"), beat, start("s-3"))

    message, left = take_batch(start("s-1"), outbox)

    assert [s.attempt_id for s in message.batch.starts] == ["s-1", "s-2"]
    assert left == [beat]
    assert drained(outbox) == [start("s-3")], "what follows the heartbeat waits its turn"


def test_the_end_of_the_stream_ends_the_batch_and_is_handed_back() -> None:
    outbox = queued(result("r-1"), None)

    message, left = take_batch(start("s-1"), outbox)

    assert [s.attempt_id for s in message.batch.starts] == ["s-1"]
    assert [r.attempt_id for r in message.batch.results] == ["r-1"]
    assert left == [None] and outbox.empty()


def test_a_lone_message_goes_out_as_it_is() -> None:
    first = credit(4)

    message, left = take_batch(first, queued())

    assert message is first
    assert left == []


def test_a_message_followed_only_by_one_the_batch_cannot_carry_goes_out_as_it_is() -> None:
    first, beat = start("s-1"), heartbeat("s-1")

    message, left = take_batch(first, queued(beat))

    assert message is first
    assert left == [beat]


def test_the_byte_cap_starts_a_new_message_with_the_result_that_would_pass_it() -> None:
    part = MAX_BATCH_BYTES * 2 // 5  # two fit in one message, three do not
    big = [
        result("r-1", output=b"o" * part),
        result("r-2", message="m" * (part // 2), detail="d" * (part // 2)),  # these count too
        result("r-3", output=b"o" * part),
    ]
    outbox = queued(*big[1:], start("s-1"))

    message, left = take_batch(big[0], outbox)

    assert [r.attempt_id for r in message.batch.results] == ["r-1", "r-2"]
    assert left == [big[2]], "the result over the cap goes next, first of its own message"
    assert drained(outbox) == [start("s-1")]

    following, after = take_batch(big[2], queued(start("s-1")))
    assert [r.attempt_id for r in following.batch.results] == ["r-3"]
    assert [s.attempt_id for s in following.batch.starts] == ["s-1"]
    assert after == []


def test_the_item_cap_leaves_the_rest_queued_for_the_next_message() -> None:
    names = [f"s-{n}" for n in range(MAX_BATCH_ITEMS + 500)]
    outbox = queued(*(start(name) for name in names[1:]))

    message, left = take_batch(start(names[0]), outbox)
    assert [s.attempt_id for s in message.batch.starts] == names[:MAX_BATCH_ITEMS]
    assert left == []

    first = outbox.get_nowait()
    assert first is not None
    following, left = take_batch(first, outbox)
    assert [s.attempt_id for s in following.batch.starts] == names[MAX_BATCH_ITEMS:]
    assert left == [] and outbox.empty()


def test_only_releases_starts_results_and_credit_are_batchable() -> None:
    assert all(batchable(m) for m in (start("s"), release("x"), result("r"), credit(1)))
    assert not batchable(heartbeat("s"))
    assert not batchable(pb.ConnectRequest(hello=pb.Hello(worker_id="w", capacity=1)))
    assert not batchable(None)
