"""Queue rates (``domain.rates``): the grammar of COUNT/PERIOD and its bounds, and the
sliding window over slots, driven by a fake clock through a grant book that keeps the
grants as ``queue_rate_slots`` does (one counter per key and slot)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

import pytest

from coordinator.domain.rates import (
    MAX_RATE_COUNT,
    MAX_RATE_PERIOD_MS,
    QueueRate,
    RateError,
    admit,
    format_period,
    parse_rate,
    room,
)


@dataclass(frozen=True)
class Job:
    id: int
    key: str


class GrantBook:
    """The store's counts in memory (``store.claim_rates``): reserved jobs per key, and
    starts per key and slot. A claim reads both; a start moves its job from one to the
    other; a release gives its room back."""

    def __init__(self, rate: QueueRate) -> None:
        self.rate = rate
        self.slots: dict[tuple[str, int], int] = defaultdict(int)
        self.reserved: dict[str, int] = defaultdict(int)
        self.starts: list[tuple[int, str]] = []

    def used(self, now_ms: int) -> dict[str, int]:
        since = self.rate.counted_since(now_ms)
        totals: dict[str, int] = defaultdict(int, self.reserved)
        for (key, slot), granted in self.slots.items():
            if slot > since:
                totals[key] += granted
        return dict(totals)

    def claim(self, now_ms: int, candidates: list[Job], limit: int) -> list[Job]:
        taken, granted = admit(self.rate, self.used(now_ms), candidates, lambda job: job.key, limit)
        for key, n in granted.items():
            self.reserved[key] += n
        return taken

    def start(self, job: Job, now_ms: int) -> None:
        key = job.key if self.rate.per_key else ""
        self.reserved[key] -= 1
        self.slots[(key, self.rate.slot_of(now_ms))] += 1
        self.starts.append((now_ms, job.key))

    def release(self, job: Job) -> None:
        self.reserved[job.key if self.rate.per_key else ""] -= 1

    def claim_and_start(self, now_ms: int, candidates: list[Job], limit: int) -> list[Job]:
        taken = self.claim(now_ms, candidates, limit)
        for job in taken:
            self.start(job, now_ms)
        return taken


def most_in_any_window(times: list[int], period_ms: int) -> int:
    """The most of ``times`` in any half-open window [t, t + period)."""
    times = sorted(times)
    return max((sum(1 for u in times if t <= u < t + period_ms) for t in times), default=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100/1m", (100, 60_000)),
        ("10/1s", (10, 1_000)),
        ("5/500ms", (5, 500)),
        ("10/s", (10, 1_000)),
        ("1/2h", (1, 7_200_000)),
    ],
)
def test_rates_parse(text: str, expected: tuple[int, int]) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0/1s", "count must be 1"),
        ("10/0s", "period must be"),
        ("abc", "COUNT/PERIOD"),
        ("-1/1s", "COUNT/PERIOD"),
        ("10/-1s", "a period is"),
        ("10/1x", "a period is"),
        ("10/8d", "period must be"),
        ("10/" + "9" * 40 + "s", "a period is"),
        ("9" * 40 + "/1s", "count must be 1"),
        (f"{MAX_RATE_COUNT + 1}/1s", "count must be 1"),
        ("", "COUNT/PERIOD"),
    ],
)
def test_bad_rates_say_why(text: str, says: str) -> None:
    with pytest.raises(RateError, match=says):
        parse_rate(text)


def test_a_rate_out_of_bounds_cannot_be_made() -> None:
    with pytest.raises(RateError):
        QueueRate(0, 1_000)
    with pytest.raises(RateError):
        QueueRate(1, MAX_RATE_PERIOD_MS + 1)
    assert format_period(60_000) == "1m" and format_period(1_500) == "1500ms"


def test_a_queue_rate_holds_in_every_window_and_still_runs_at_its_rate() -> None:
    """10/1s, claims of up to 8 jobs at random moments (a fake clock), each started
    after a random delay and some released unstarted: never more than 10 starts in any
    1 s window, and 40 jobs all start within 4.4 s (one slot of slack per period)."""
    rate = QueueRate(10, 1_000)
    book = GrantBook(rate)
    rng = random.Random(41)
    backlog = [Job(i, "") for i in range(40)]
    pending: list[tuple[int, Job]] = []
    now = 0
    while backlog or pending:
        for due, job in [p for p in pending if p[0] <= now]:
            pending.remove((due, job))
            if rng.random() < 0.1:
                book.release(job)  # given back unstarted: claimable again
                backlog.append(job)
            else:
                book.start(job, now)
        taken = book.claim(now, backlog, rng.randint(1, 8))
        backlog = [job for job in backlog if job not in taken]
        pending += [(now + rng.randint(0, 400), job) for job in taken]
        now += rng.randint(1, 30)
    times = [at for at, _ in book.starts]
    assert len(times) == 40
    assert most_in_any_window(times, 1_000) <= 10
    assert max(times) <= 5 * (1_000 + rate.slot_ms)  # 40 starts, some claimed twice


def test_a_restart_reads_the_same_grants() -> None:
    """The grants are all the state: a book rebuilt from them (a restarted coordinator
    reading the table) grants nothing a running one would not."""
    rate = QueueRate(5, 1_000)
    book = GrantBook(rate)
    assert len(book.claim_and_start(0, [Job(i, "") for i in range(10)], 10)) == 5
    restarted = GrantBook(rate)
    restarted.slots = book.slots.copy()
    assert restarted.claim(400, [Job(i, "") for i in range(10)], 10) == []
    assert room(rate, restarted.used(400)) == 0
    assert len(restarted.claim(1_100, [Job(i, "") for i in range(10)], 10)) == 5


def test_reserved_jobs_count_until_they_start_or_are_given_back() -> None:
    rate = QueueRate(3, 1_000)
    book = GrantBook(rate)
    jobs = [Job(i, "") for i in range(6)]
    first = book.claim(0, jobs, 10)
    assert len(first) == 3
    # Unstarted for longer than a window: still counted, since each may start any moment.
    assert book.claim(5_000, jobs[3:], 10) == []
    book.release(first[0])
    assert len(book.claim(5_000, jobs[3:], 10)) == 1


def test_per_key_rates_hold_per_key_and_add_up_across_keys() -> None:
    rate = QueueRate(3, 1_000, per_key=True)
    book = GrantBook(rate)
    rng = random.Random(7)
    keys = ["tenant-a", "tenant-b", "tenant-c"]
    backlog = [Job(i, keys[i % 3] if i < 30 else "tenant-a") for i in range(60)]
    now = 0
    while now < 3_000:
        taken = book.claim_and_start(now, backlog, rng.randint(1, 10))
        backlog = [job for job in backlog if job not in taken]
        now += rng.randint(1, 50)
    for key in keys:
        times = [at for at, k in book.starts if k == key]
        assert most_in_any_window(times, 1_000) <= 3
    all_times = [at for at, _ in book.starts]
    # The keys' rates add up: the queue as a whole started more than one key may.
    assert most_in_any_window(all_times, 1_000) > 3
    assert most_in_any_window(all_times, 1_000) <= 9


def test_a_key_at_its_rate_does_not_hold_back_another_key() -> None:
    rate = QueueRate(2, 1_000, per_key=True)
    candidates = [Job(i, "a") for i in range(5)] + [Job(9, "b")]
    taken, granted = admit(rate, {"a": 2}, candidates, lambda job: job.key, 10)
    assert [job.id for job in taken] == [9]
    assert granted == {"b": 1}
    assert room(rate, {"a": 2}) is None


def test_a_queue_wide_rate_counts_every_key_as_one() -> None:
    rate = QueueRate(2, 1_000)
    candidates = [Job(1, "a"), Job(2, "b"), Job(3, "c")]
    taken, granted = admit(rate, {}, candidates, lambda job: job.key, 10)
    assert [job.id for job in taken] == [1, 2]
    assert granted == {"": 2}
    assert room(rate, {"": 1}) == 1
