"""A claim's keys' room (``store.claim_keys.KeyRoom``): the keys without room it names
are the same whether worked out afresh or kept up job by job as a call admits jobs
(it keeps them between reads of one call), and with a per-key rate they follow the
rate's counts, which the rate's step moves outside ``admit``."""

from __future__ import annotations

import dataclasses

from coordinator.domain.records import JobRecord
from coordinator.store.claim_keys import KeyRoom
from tests.unit.domain_doubles import JOB_RECORD


def _jobs(*keys: str) -> list[JobRecord]:
    return [dataclasses.replace(JOB_RECORD, id=f"j{n}", concurrency_key=key) for n, key in enumerate(keys)]


def _afresh(room: KeyRoom) -> list[str]:
    return KeyRoom(room.limit, dict(room.active), room.rate_count, dict(room.rate_used)).full()


def test_the_keys_without_room_are_kept_up_as_jobs_are_admitted() -> None:
    room = KeyRoom(2, {"a": 2, "b": 1})
    assert room.full() == ["a"]

    admitted = room.admit(_jobs("a", "b", "b", "c", "d", "d"))

    assert [job.concurrency_key for job in admitted] == ["b", "c", "d", "d"]
    assert room.dropped
    assert room.full() == ["a", "b", "d"] == _afresh(room)
    assert room.admit(_jobs("c", "c")) != []
    assert room.full() == ["a", "b", "c", "d"] == _afresh(room)


def test_with_a_per_key_rate_the_keys_without_room_follow_the_rates_counts() -> None:
    used: dict[str, int] = {"a": 1}
    room = KeyRoom(None, {}, rate_count=2, rate_used=used)
    assert room.full() == []

    used["a"] = 2  # the rate's step counts what it admitted
    used["b"] = 2

    assert room.full() == ["a", "b"] == _afresh(room)
