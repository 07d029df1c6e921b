"""Concurrency keys in the SDK (docs/flow-control.md): ``@job(concurrency_key=...)``
derives a job's key from its payload, a key given at enqueue wins (R-3's order), and a
bad key, given or derived, is refused before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from worker_sdk import ArgumentError, Client, EnqueueItem, job


@job("sdk.keys.tenant", concurrency_key=lambda p: f"tenant:{p.tenant_id}")
@dataclass
class PerTenant:
    tenant_id: str


@job("sdk.keys.fixed", concurrency_key="one-at-a-time")
@dataclass
class Fixed:
    n: int


@job("sdk.keys.none")
@dataclass
class Unkeyed:
    n: int


@pytest.fixture
def client() -> Iterator[Client]:
    made = Client("127.0.0.1:1")  # the channel connects lazily: nothing is sent
    yield made
    made.close()


def test_the_key_is_derived_from_the_payload_and_an_explicit_one_wins(client: Client) -> None:
    request = client._enqueue_request(
        [
            PerTenant("42"),
            EnqueueItem(PerTenant("42"), concurrency_key="override"),
            Fixed(1),
            Unkeyed(1),
            EnqueueItem(Unkeyed(2), concurrency_key="k:2"),
        ]
    )
    assert [j.concurrency_key for j in request.jobs] == ["tenant:42", "override", "one-at-a-time", "", "k:2"]


def test_raw_enqueue_sends_the_key_as_given(client: Client) -> None:
    request = client._raw_enqueue_request(
        "w",
        b"{}",
        payload_version=1,
        queue="default",
        priority=0,
        run_at=None,
        idempotency_key=None,
        max_executions=None,
        parents=(),
        concurrency_key="t:1",
    )
    assert request.jobs[0].concurrency_key == "t:1"
    with pytest.raises(ArgumentError, match="concurrency_key must be a str"):
        client._raw_enqueue_request(
            "w",
            b"{}",
            payload_version=1,
            queue="default",
            priority=0,
            run_at=None,
            idempotency_key=None,
            max_executions=None,
            parents=(),
            concurrency_key=7,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("key", ["a b", "x/y", "..", "k" * 129])
def test_a_bad_key_given_or_derived_is_refused_before_sending(client: Client, key: str) -> None:
    with pytest.raises(ArgumentError, match="concurrency_key"):
        client._enqueue_request([EnqueueItem(Unkeyed(1), concurrency_key=key)])
    with pytest.raises(ArgumentError, match="derived concurrency_key"):
        client._enqueue_request([_derived(key)])


def _derived(key: str) -> object:
    @job("sdk.keys.bad", concurrency_key=lambda p: key)
    @dataclass
    class Bad:
        n: int

    return Bad(1)


def test_a_derived_key_that_is_not_a_str_is_refused(client: Client) -> None:
    @job("sdk.keys.int", concurrency_key=lambda p: p.n)
    @dataclass
    class IntKey:
        n: int

    with pytest.raises(ArgumentError, match="must be a str, got int"):
        client._enqueue_request([IntKey(3)])


@pytest.mark.parametrize("bad", ["a b", 5])
def test_a_bad_declared_key_fails_at_decoration(bad: object) -> None:
    with pytest.raises(ValueError, match="concurrency_key"):
        job("sdk.keys.decl", concurrency_key=bad)  # type: ignore[arg-type]
