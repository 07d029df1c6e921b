"""A Result for a claim that was never started, over the real stream: answered for what
it is (never started), not as a superseded attempt, and the claim is still good."""

from __future__ import annotations

from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from worker_sdk import AsyncClient, JobState
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb


async def test_a_result_before_its_start_is_rejected_as_never_started(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    made = await client.enqueue_raw("tests.echo", b'{"text": "early"}')
    worker = RawWorker(coordinator.target, "eager-worker", ["tests.echo"])
    try:
        assignment = await worker.claim()
        ack = await worker.succeed(assignment.attempt_id, b"too early")
        assert ack.status == pb.ResultAck.STATUS_REJECTED
        assert ack.reason == "ATTEMPT_NOT_STARTED"
        assert "never started" in ack.message and "superseded" not in ack.message
        assert ack.metadata["attempt_id"] == assignment.attempt_id
        assert (await client.get(made.id)).state is JobState.RESERVED  # nothing changed

        assert (await worker.start(assignment.attempt_id)).granted
        done = await worker.succeed(assignment.attempt_id, b"on time")
        assert done.status == pb.ResultAck.STATUS_ACCEPTED
    finally:
        await worker.close()
    info = await client.get(made.id)
    assert (info.state, info.output, info.executions) == (JobState.SUCCEEDED, b"on time", 1)
