"""Unique jobs on both engines: at most one unfinished job per wire name and unique key;
a repeat returns it, and once it ended the key is free again."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.errors import InvalidArgument
from coordinator.store import Store

from .harness import OTHER_WIRE, WIRE, Harness


def test_a_repeat_returns_the_unfinished_job(harness: Harness) -> None:
    [first] = harness.enqueue_specs([NewJobSpec(WIRE, b"1", unique_key="report-2026-12")])
    [again, other_type] = harness.enqueue_specs(
        [
            NewJobSpec(WIRE, b"2", unique_key="report-2026-12"),
            NewJobSpec(OTHER_WIRE, b"3", unique_key="report-2026-12"),
        ]
    )
    assert (again.job_id, again.existing) == (first.job_id, True)
    assert not other_type.existing and other_type.job_id != first.job_id
    assert harness.count_jobs() == 2


def test_one_batch_holds_one_job_per_key(harness: Harness) -> None:
    spec = NewJobSpec(WIRE, b"", unique_key="k")
    first, second = harness.enqueue_specs([spec, spec])
    assert (second.job_id, second.existing, first.existing) == (first.job_id, True, False)


def test_once_the_job_ended_the_key_is_free_again(harness: Harness) -> None:
    [first] = harness.enqueue_specs([NewJobSpec(WIRE, b"", unique_key="k")])
    running = harness.run(first.job_id)
    assert harness.enqueue_specs([NewJobSpec(WIRE, b"", unique_key="k")])[0].existing  # still running
    assert harness.report(running.attempt_id, Outcome.SUCCEEDED).accepted

    [after] = harness.enqueue_specs([NewJobSpec(WIRE, b"", unique_key="k")])

    assert not after.existing and after.job_id != first.job_id


@pytest.mark.parametrize(("key", "message"), [("k" * 257, "257 characters"), ("a\x00b", "NUL")])
def test_a_bad_key_is_refused_and_creates_nothing(harness: Harness, key: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message) as refused:
        harness.enqueue_specs([NewJobSpec(WIRE, b"", unique_key=key)])
    assert (refused.value.field, refused.value.reason) == ("jobs[0].unique_key", "UNIQUE_KEY_INVALID")
    assert harness.count_jobs() == 0


@pytest.mark.postgres
def test_two_replicas_enqueueing_the_same_key_at_once_make_one_job(postgres_url: str) -> None:
    from tests.conftest import _truncate

    _truncate(postgres_url)
    stores = [Store.open(postgres_url) for _ in range(4)]
    try:
        harnesses = [Harness.build(store, FakeClock(), CoordinatorConfig()) for store in stores]
        barrier = threading.Barrier(len(harnesses))

        def enqueue(harness: Harness) -> str:
            barrier.wait()
            return harness.enqueue_specs([NewJobSpec(WIRE, b"", unique_key="once")])[0].job_id

        with ThreadPoolExecutor(len(harnesses)) as pool:
            ids = set(pool.map(enqueue, harnesses))

        assert len(ids) == 1
        assert harnesses[0].count_jobs() == 1
    finally:
        for store in stores:
            store.close()
