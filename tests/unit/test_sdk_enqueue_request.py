"""The SDK's enqueue request (``Client._enqueue_request``): each job is filled in place
in the request, setting only what differs from the wire's defaults, so the bytes must be
what a ``NewJob`` built by keywords gives, for every option of ``EnqueueItem``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.duration_pb2 import Duration

from worker_sdk import ArgumentError, Client, EnqueueItem, job
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2

PARENT = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
CHOSEN = "0193a7c2-5b1e-7c3d-9f00-ffffffffffff"


@job("sdk.request.plain")
@dataclass
class Plain:
    n: int


@job("sdk.request.declared", version=2, queue="mail", priority=3, max_executions=5)
@dataclass
class Declared:
    to: str


@pytest.fixture
def client() -> Iterator[Client]:
    made = Client("127.0.0.1:1")  # the channel connects lazily: nothing is sent
    yield made
    made.close()


def test_a_bare_payload_sets_nothing_but_its_name_queue_payload_and_version(client: Client) -> None:
    request = client._enqueue_request([Plain(7)])
    expected = job_service_pb2.NewJob(
        wire_name="sdk.request.plain", queue="default", payload=b'{"n":7}', payload_version=1
    )
    assert request.jobs[0] == expected
    assert not request.jobs[0].HasField("settings") and not request.jobs[0].HasField("run_at")


def test_every_option_of_an_item_reaches_its_job_as_keywords_give(client: Client) -> None:
    run_at = datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)
    item = EnqueueItem(
        Declared("a"),
        run_at=run_at,
        priority=-4,
        queue="urgent",
        parents=[PARENT],
        idempotency_key="order-1",
        job_id=CHOSEN,
        unique_key="user-9",
        concurrency_key="tenant:7",
    )
    expected = job_service_pb2.NewJob(
        wire_name="sdk.request.declared",
        queue="urgent",
        payload=b'{"to":"a"}',
        payload_version=2,
        priority=-4,
        idempotency_key="order-1",
        settings=job_pb2.JobSettings(max_executions=5),
        parent_ids=[PARENT],
        id=CHOSEN,
        unique_key="user-9",
        concurrency_key="tenant:7",
    )
    expected.run_at.FromDatetime(run_at)
    request = client._enqueue_request([Plain(1), item])
    assert request.jobs[1].SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    # The declaration's queue and priority apply where the item leaves them out.
    declared = client._enqueue_request([Declared("b")]).jobs[0]
    assert (declared.queue, declared.priority) == ("mail", 3)


def test_configured_settings_are_copied_into_each_job_not_shared(client: Client) -> None:
    client.configure_job(Plain).with_retry_delay(timedelta(seconds=2), timedelta(seconds=8))
    request = client._enqueue_request([Plain(1), Plain(2)])
    assert [message.settings for message in request.jobs] == [
        job_pb2.JobSettings(retry_initial_delay=Duration(seconds=2), retry_max_delay=Duration(seconds=8))
    ] * 2
    request.jobs[0].settings.max_executions = 9  # the other job's copy is its own
    assert not request.jobs[1].settings.HasField("max_executions")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (EnqueueItem(Plain(1), parents=""), "parents must be a sequence of job IDs"),
        (EnqueueItem(Plain(1), parents=[""]), "parent job IDs must be non-empty str"),
        (EnqueueItem(Plain(1), idempotency_key=""), "idempotency_key must be a non-empty str"),
        (EnqueueItem(Plain(1), unique_key=""), "unique_key must be a non-empty str"),
        (EnqueueItem(Plain(1), priority=True), "priority must be an int"),
        (EnqueueItem(Plain(1), queue=3), "queue must be a str"),  # type: ignore[arg-type]
        (EnqueueItem(Plain(1), run_at=datetime(2027, 1, 1)), "run_at must be a timezone-aware datetime"),
    ],
)
def test_a_bad_option_names_its_job_in_a_batch(client: Client, item: EnqueueItem, message: str) -> None:
    with pytest.raises(ArgumentError, match=f"^job 1: {message}"):
        client._enqueue_request([Plain(0), item])
    with pytest.raises(ArgumentError, match=f"^{message}"):  # alone, the job needs no number
        client._enqueue_request([item])
