"""A worker stream attacked with what it may send: it is read only as far as its
budget allows, its heartbeats cost the store only the attempts it holds, its Hello
names a bounded number of queues and wire names, and another tenant's enqueue claims
only for the sessions of its own queues. Real coordinator on port 0, both engines."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import grpc
import pytest

from coordinator.dispatch import Dispatcher
from coordinator.domain.bounds import STREAM_BOUNDS
from coordinator.domain.ids import uuid7
from coordinator.process import RunningCoordinator
from coordinator.store.tx import Tx
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from tests.support import eventually
from worker_sdk import AsyncClient
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

WIRE = "tests.echo"


@asynccontextmanager
async def serving(database_url: str) -> AsyncIterator[tuple[RunningCoordinator, AsyncClient]]:
    async with coordinator_without_wake_ups(database_url) as running, AsyncClient(running.target) as client:
        yield running, client


@contextmanager
def writer_held(dispatcher: Dispatcher) -> Iterator[threading.Event]:
    """Every worker batch waits on the writer until the event is set (a busy writer)."""
    release = threading.Event()
    process = dispatcher.process

    def held(batch: Any) -> Any:
        release.wait(30)
        return process(batch)

    dispatcher.process = held
    try:
        yield release
    finally:
        release.set()
        dispatcher.process = process


def busy_slots(dispatcher: Dispatcher, count: int) -> Callable[[], bool]:
    return lambda: dispatcher.slots.writing == count


def counting(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[tuple[Any, ...]]:
    """Records the arguments of every call of ``owner.name`` (the call goes on)."""
    calls: list[tuple[Any, ...]] = []
    method = getattr(owner, name)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return method(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


async def holding_one(
    running: RunningCoordinator, client: AsyncClient, worker_id: str
) -> tuple[RawWorker, str]:
    """A raw worker of capacity 1 that holds one started attempt."""
    await client.enqueue_raw(WIRE, b"{}")
    worker = RawWorker(running.target, worker_id, [WIRE], capacity=1)
    assignment = await worker.claim()
    assert (await worker.start(assignment.attempt_id)).granted
    return worker, assignment.attempt_id


def random_attempt_ids(count: int) -> list[str]:
    return [uuid7(1_700_000_000_000 + n) for n in range(count)]


async def test_reader_stops_reading_at_its_budget_while_the_writer_is_busy(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(database_url) as (running, client):
        dispatcher = running.app.dispatcher
        starts = counting(monkeypatch, Dispatcher, "start")
        worker = RawWorker(running.target, "flooder", [WIRE], capacity=1)
        await worker.next("welcome")
        budget = STREAM_BOUNDS.stream_budget(1)
        sent = 20 * budget
        with writer_held(dispatcher) as release:
            for attempt_id in random_attempt_ids(sent):
                worker.send(start=pb.StartRequest(attempt_id=attempt_id))
            await eventually(lambda: len(starts) >= budget, what="the reader took its budget in")
            await asyncio.sleep(0.3)  # it would go on reading here if it were unbounded
            assert len(starts) == budget
            release.set()
            # Bounded, not lost: every start is answered (refused: nobody was assigned it).
            answers = [await worker.next("start_answer") for _ in range(sent)]
        assert not any(answer.granted for answer in answers)  # type: ignore[attr-defined]
        assert len(starts) == sent
        # The coordinator still serves another tenant.
        other, _ = await holding_one(running, client, "other-tenant")
        await other.close()
        await worker.close()


async def test_a_stream_that_never_reads_its_answers_is_read_no_further(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(database_url) as (running, client):
        starts = counting(monkeypatch, Dispatcher, "start")
        sent = 20_000
        hello = pb.Hello(worker_id="deaf", wire_names=[WIRE], capacity=1)

        async def requests() -> AsyncIterator[pb.ConnectRequest]:
            yield pb.ConnectRequest(hello=hello)
            for attempt_id in random_attempt_ids(sent):
                yield pb.ConnectRequest(start=pb.StartRequest(attempt_id=attempt_id))

        # A fixed 64 KiB receive window: the client's buffer fills instead of growing.
        options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65_535)]
        channel = grpc.aio.insecure_channel(running.target, options=options)
        call = worker_service_pb2_grpc.WorkerServiceStub(channel).Connect(requests())
        await call.read()  # the welcome; nothing is read after it
        await eventually(lambda: len(starts) > 0, what="the first starts were read")
        # The answers fill gRPC's window, then the stream's budget: reading stops.
        previous = -1
        while previous != len(starts):
            previous = len(starts)
            await asyncio.sleep(0.5)
        assert len(starts) < sent, len(starts)
        # The coordinator still serves another tenant meanwhile.
        other, _ = await holding_one(running, client, "other-tenant")
        await other.close()
        call.cancel()
        await channel.close(None)


async def test_the_batch_waiting_for_the_writer_stops_at_its_bound(database_url: str) -> None:
    async with serving(database_url) as (running, _):
        dispatcher = running.app.dispatcher
        bound = 10
        dispatcher.stream_bounds = dataclasses.replace(STREAM_BOUNDS, max_pending_batch_items=bound)
        workers = [RawWorker(running.target, f"flooder-{n}", [WIRE], capacity=100) for n in range(2)]
        for worker in workers:
            await worker.next("welcome")
        per_worker = 100
        with writer_held(dispatcher) as release:
            for worker in workers:
                for attempt_id in random_attempt_ids(per_worker):
                    worker.send(start=pb.StartRequest(attempt_id=attempt_id))
            await eventually(dispatcher.batch_full, what="the pending batch reached its bound")
            await asyncio.sleep(0.3)  # the readers would go on here if they did not wait
            # Each reader checks after the message it took: at most one more each.
            assert dispatcher.pending.items <= bound + len(workers)
            release.set()
            for worker in workers:  # backpressure, not loss: every start is answered
                answers = [await worker.next("start_answer") for _ in range(per_worker)]
                assert len(answers) == per_worker
        for worker in workers:
            await worker.close()


async def test_heartbeats_sent_while_the_writer_is_busy_make_one_store_write(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(database_url) as (running, client):
        worker, attempt_id = await holding_one(running, client, "heartbeater")
        heartbeats = counting(monkeypatch, Dispatcher, "heartbeat")
        renewals = counting(monkeypatch, Tx, "renew_leases")
        dispatcher = running.app.dispatcher
        with writer_held(dispatcher):
            # Repeated starts (answered as the first) keep every batch slot of the writer busy.
            for busy in range(1, dispatcher.batches_in_flight + 1):
                worker.send(start=pb.StartRequest(attempt_id=attempt_id))
                await eventually(busy_slots(dispatcher, busy), what="a busy writer slot")
            for _ in range(50):
                worker.send(heartbeat=pb.Heartbeat(attempt_ids=[attempt_id]))
            await eventually(lambda: len(heartbeats) == 50, what="every heartbeat was read")
        answer = await worker.next("heartbeat_answer")
        assert list(answer.lost_attempt_ids) == []  # type: ignore[attr-defined]
        assert [list(ids) for ids, *_ in renewals] == [[attempt_id]]
        await worker.close()


async def test_heartbeat_naming_attempts_the_stream_does_not_hold_costs_no_store_work(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(database_url) as (running, client):
        worker, attempt_id = await holding_one(running, client, "namer")
        renewals = counting(monkeypatch, Tx, "renew_leases")
        looked_up: Callable[[], set[str]] = lambda: {a for ids, *_ in renewals for a in ids}  # noqa: E731
        first, second = random_attempt_ids(1_000), random_attempt_ids(2_000)[1_000:]
        worker.send(heartbeat=pb.Heartbeat(attempt_ids=[attempt_id, *first]))
        answer = await worker.next("heartbeat_answer")
        assert set(answer.lost_attempt_ids) == set(first)  # type: ignore[attr-defined]
        # A reconnecting worker's earlier attempts are looked up: at most that many.
        assert len(looked_up() & set(first)) <= STREAM_BOUNDS.unheld_heartbeat_checks(1)
        worker.send(heartbeat=pb.Heartbeat(attempt_ids=[attempt_id, *second]))
        answer = await worker.next("heartbeat_answer")
        assert set(answer.lost_attempt_ids) == set(second)  # type: ignore[attr-defined]
        assert not looked_up() & set(second)
        assert attempt_id in looked_up()  # the one it holds is renewed
        await worker.close()


@pytest.mark.parametrize(
    ("field", "names"),
    [
        ("queues", [f"q{n}" for n in range(STREAM_BOUNDS.max_hello_queues + 1)]),
        ("wire_names", [f"w{n}" for n in range(STREAM_BOUNDS.max_hello_wire_names + 1)]),
    ],
)
async def test_hello_naming_too_many_queues_or_wire_names_is_refused(
    database_url: str, field: str, names: Sequence[str]
) -> None:
    async with serving(database_url) as (running, client):
        hello: dict[str, Any] = {"queues": ["q0"], "wire_names": [WIRE], field: names}
        worker = RawWorker(running.target, "wide", hello["wire_names"], queues=hello["queues"])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await worker.next("welcome")
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert f"hello.{field}" in str(refused.value.details())
        assert not running.app.dispatcher.sessions
        await worker.close()
        other, _ = await holding_one(running, client, "other-tenant")
        await other.close()


async def test_an_enqueue_claims_only_for_the_sessions_taking_from_its_queue(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(database_url) as (running, client):
        queues = [f"wide-{n}" for n in range(STREAM_BOUNDS.max_hello_queues)]
        names = [f"wide.{n}" for n in range(STREAM_BOUNDS.max_hello_wire_names)]
        wide = RawWorker(running.target, "wide", names, queues=queues, capacity=100)
        wide.send(credit=pb.Credit(count=100))
        dispatcher = running.app.dispatcher
        await eventually(lambda: any(s.drained for s in dispatcher.sessions), what="the wide claim ran")
        claims = counting(monkeypatch, Tx, "claim")
        read: Callable[[], set[str]] = lambda: {  # noqa: E731
            q for args in claims for wanted in args[0] for q in wanted.queues
        }
        tenant = RawWorker(running.target, "tenant", [WIRE], queues=["tenant"], capacity=1)
        tenant.send(credit=pb.Credit(count=1))
        await eventually(
            lambda: len(dispatcher.sessions) == 2 and read() == {"tenant"}, what="tenant claimed"
        )
        for _ in range(5):
            await client.enqueue_raw(WIRE, b"{}", queue="tenant")
            assignment = await tenant.next("assignment")
            assert (await tenant.start(assignment.attempt_id)).granted  # type: ignore[attr-defined]
            assert (await tenant.succeed(assignment.attempt_id)).status == pb.ResultAck.STATUS_ACCEPTED  # type: ignore[attr-defined]
            tenant.send(credit=pb.Credit(count=1))
        assert read() == {"tenant"}  # no claim asked for the wide session's 100 queues again
        await tenant.close()
        await wide.close()


async def test_once_the_loop_stops_a_stream_sending_without_end_is_read_no_more(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(database_url) as (running, _):
        starts = counting(monkeypatch, Dispatcher, "start")
        attempt_id = uuid7(1_700_000_000_000)
        hello = pb.Hello(worker_id="endless", wire_names=[WIRE], capacity=1)

        async def endless() -> AsyncIterator[pb.ConnectRequest]:
            yield pb.ConnectRequest(hello=hello)
            while True:
                yield pb.ConnectRequest(start=pb.StartRequest(attempt_id=attempt_id))

        async with grpc.aio.insecure_channel(running.target) as channel:
            call = worker_service_pb2_grpc.WorkerServiceStub(channel).Connect(endless())
            await call.read()  # welcome
            await eventually(lambda: len(starts) > 100, what="the flood is read")
            loop_task = running.app._dispatch_task
            assert loop_task is not None
            running.app.dispatcher.stop()  # what SIGTERM does once the drain is over
            await eventually(loop_task.done, what="the loop ended")
            taken = len(starts)
            await asyncio.sleep(0.5)  # a reader still reading would take thousands meanwhile
            assert len(starts) <= taken + 1
            await asyncio.wait_for(running.stop(grace_s=1), timeout=60)
            call.cancel()
