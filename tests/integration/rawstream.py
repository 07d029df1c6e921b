"""A worker that speaks the stream protocol by hand, for tests that need to stop at a
precise point of it (before start, a late result) where the SDK would carry on.

Run as a process (``python -m tests.integration.rawstream TARGET WIRE_NAME``) it claims
one job, prints ``claimed <job_id> <attempt_id>`` and then waits, never starting it, so
a test can ``kill -9`` it between claim and start.
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from worker_sdk.proto.runwick.v1 import job_pb2, worker_service_pb2_grpc
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb


class RawWorker:
    """One stream; ``send`` queues messages, ``next(kind)`` awaits the next of a kind.

    With ``batches`` the Hello says the worker reads CoordinatorBatch messages:
    ``next_batch`` awaits the next one, ``batch_items`` collects items of one kind
    across them. Every message read is kept in ``received``, oldest first.
    """

    def __init__(
        self,
        target: str,
        worker_id: str,
        wire_names: list[str],
        *,
        capacity: int = 1,
        lease_ms: int = 60_000,
        token: str | None = None,
        queues: list[str] | None = None,
        batches: bool = False,
        host: str = "",
        sdk: str = "",
    ):
        self.received: list[pb.ConnectResponse] = []
        self._unread: defaultdict[str, list[Any]] = defaultdict(list)
        """Batch items read but not yet taken by ``batch_items``, by field."""
        self.channel = grpc.aio.insecure_channel(target)
        self.outgoing: asyncio.Queue[pb.ConnectRequest | None] = asyncio.Queue()
        lease = Duration()
        lease.FromMilliseconds(lease_ms)
        self.outgoing.put_nowait(
            pb.ConnectRequest(
                hello=pb.Hello(
                    worker_id=worker_id,
                    queues=queues or [],
                    wire_names=wire_names,
                    capacity=capacity,
                    lease=lease,
                    batches=batches,
                    host=host,
                    sdk=sdk,
                )
            )
        )
        stub = worker_service_pb2_grpc.WorkerServiceStub(self.channel)
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.call = stub.Connect(self._requests(), metadata=metadata)

    async def _requests(self) -> AsyncIterator[pb.ConnectRequest]:
        while (message := await self.outgoing.get()) is not None:
            yield message

    def send(self, **kind: object) -> None:
        self.outgoing.put_nowait(pb.ConnectRequest(**kind))  # type: ignore[arg-type]

    def send_batch(self, **items: Any) -> None:
        """Sends one WorkerBatch, e.g. ``send_batch(starts=[...], credit=1)``."""
        self.send(batch=pb.WorkerBatch(**items))

    async def read(self, timeout: float = 10.0) -> pb.ConnectResponse:
        """The next message, whatever its kind."""
        message = await asyncio.wait_for(self.call.read(), timeout)
        if message is grpc.aio.EOF:
            raise EOFError("stream ended")
        self.received.append(message)
        return message  # type: ignore[no-any-return]

    async def next(self, kind: str, timeout: float = 10.0) -> object:
        async def read() -> object:
            while True:
                message = await self.read(timeout)
                if message.WhichOneof("kind") == kind:
                    return getattr(message, kind)
                if message.WhichOneof("kind") == "batch":
                    self._keep(message.batch)  # skipped here, still there for batch_items

        return await asyncio.wait_for(read(), timeout)

    async def next_batch(self, timeout: float = 10.0) -> pb.CoordinatorBatch:
        batch = await self.next("batch", timeout)
        assert isinstance(batch, pb.CoordinatorBatch)
        return batch

    async def batch_items(self, field: str, count: int, timeout: float = 10.0) -> list[Any]:
        """The next ``count`` items of CoordinatorBatch ``field`` (``assignments``,
        ``start_answers``, ``result_acks``, ``cancels``), from however many batches they
        come in; the other items read meanwhile are kept for later calls."""
        while len(self._unread[field]) < count:
            self._keep(await self.next_batch(timeout))
        taken, self._unread[field] = self._unread[field][:count], self._unread[field][count:]
        return taken

    def _keep(self, batch: pb.CoordinatorBatch) -> None:
        for field in ("assignments", "start_answers", "result_acks", "cancels"):
            self._unread[field].extend(getattr(batch, field))

    def kinds(self) -> list[str]:
        """The kind of every message read so far, oldest first."""
        return [str(message.WhichOneof("kind")) for message in self.received]

    async def claim(self) -> pb.Assignment:
        self.send(credit=pb.Credit(count=1))
        assignment = await self.next("assignment")
        assert isinstance(assignment, pb.Assignment)
        return assignment

    async def start(self, attempt_id: str) -> pb.StartAnswer:
        self.send(start=pb.StartRequest(attempt_id=attempt_id))
        answer = await self.next("start_answer")
        assert isinstance(answer, pb.StartAnswer)
        return answer

    async def succeed(self, attempt_id: str, output: bytes = b"") -> pb.ResultAck:
        self.send(result=pb.Result(attempt_id=attempt_id, outcome=job_pb2.OUTCOME_SUCCEEDED, output=output))
        ack = await self.next("result_ack")
        assert isinstance(ack, pb.ResultAck)
        return ack

    async def close(self) -> None:
        self.outgoing.put_nowait(None)
        self.call.cancel()
        await self.channel.close()


async def _claim_and_hang(target: str, wire_name: str) -> None:
    worker = RawWorker(target, "raw-hanging-worker", [wire_name])
    assignment = await worker.claim()
    print(f"claimed {assignment.job_id} {assignment.attempt_id}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_claim_and_hang(sys.argv[1], sys.argv[2]))
