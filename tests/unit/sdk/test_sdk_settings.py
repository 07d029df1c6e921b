"""Client-side settings: the three precedence levels and their validation (R-1..R-4, R-7).

Each test enqueues through a real client against the fake JobService and reads the
``NewJob.settings`` the coordinator would receive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from google.protobuf.duration_pb2 import Duration

from worker_sdk import ArgumentError, Client, job
from worker_sdk.proto.runwick.v1 import job_pb2

if TYPE_CHECKING:
    from conftest import FakeJobService


@job("reports.build", max_executions=4, execution_timeout=timedelta(minutes=5))
@dataclass
class BuildReport:
    name: str


@job("reports.plain", queue="reports", priority=2)
@dataclass
class PlainReport:
    name: str


@pytest.fixture
def client(job_service: tuple[FakeJobService, str]) -> Iterator[Client]:
    with Client(job_service[1]) as client:
        yield client


def sent_settings(fake: FakeJobService) -> job_pb2.JobSettings:
    settings: job_pb2.JobSettings = fake.requests[-1].jobs[0].settings
    return settings


def ms(value: int) -> Duration:
    return Duration(seconds=value // 1000, nanos=value % 1000 * 1_000_000)


def test_nothing_set_sends_empty_settings(client: Client, job_service: tuple[FakeJobService, str]) -> None:
    client.enqueue(PlainReport("q3"))
    assert sent_settings(job_service[0]) == job_pb2.JobSettings()


def test_declaration_wins_over_client_defaults(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    client.job_defaults(
        max_executions=7,
        retry_delay=(timedelta(seconds=1), timedelta(seconds=9)),
        max_unstarted_abandonments=3,
    )
    client.enqueue(BuildReport("q3"))
    assert sent_settings(job_service[0]) == job_pb2.JobSettings(
        max_executions=4,
        retry_initial_delay=ms(1000),
        retry_max_delay=ms(9000),
        execution_timeout=ms(300_000),
        max_unstarted_abandonments=3,
    )


def test_fluent_configuration_wins_over_declaration(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    client.job_defaults(
        max_executions=7, unstarted_recovery_delay=(timedelta(seconds=2), timedelta(seconds=20))
    )
    (
        client.configure_job(BuildReport)
        .with_max_executions(9)
        .with_retry_delay(timedelta(milliseconds=250), timedelta(minutes=10))
        .with_execution_timeout(timedelta(seconds=90))
        .with_max_unstarted_abandonments(8)
    )
    client.enqueue(BuildReport("q3"))
    assert sent_settings(job_service[0]) == job_pb2.JobSettings(
        max_executions=9,
        retry_initial_delay=ms(250),
        retry_max_delay=ms(600_000),
        execution_timeout=ms(90_000),
        max_unstarted_abandonments=8,
        unstarted_initial_delay=ms(2000),
        unstarted_max_delay=ms(20_000),
    )


def test_without_execution_timeout_removes_the_declared_one(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    client.job_defaults(execution_timeout=timedelta(minutes=1))
    client.configure_job(BuildReport).without_execution_timeout()
    client.enqueue(BuildReport("q3"))
    settings = sent_settings(job_service[0])
    assert settings.no_execution_timeout and not settings.HasField("execution_timeout")
    assert settings.max_executions == 4


def test_client_default_timeout_applies_when_nothing_above_sets_one(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    client.job_defaults(execution_timeout=timedelta(minutes=1))
    client.enqueue(PlainReport("q3"))
    settings = sent_settings(job_service[0])
    assert settings.execution_timeout == ms(60_000) and not settings.no_execution_timeout


def test_later_job_defaults_calls_override_only_what_they_pass(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    client.job_defaults(max_executions=7, retry_initial_delay=timedelta(seconds=1))
    client.job_defaults(max_executions=2)
    client.enqueue(PlainReport("q3"))
    assert sent_settings(job_service[0]) == job_pb2.JobSettings(
        max_executions=2, retry_initial_delay=ms(1000)
    )


def test_settings_changed_after_an_enqueue_apply_to_the_next_one(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    fake = job_service[0]
    client.enqueue(BuildReport("q3"))
    first = fake.requests[-1].jobs[0].settings
    client.configure_job(BuildReport).with_max_executions(11)
    client.enqueue(BuildReport("q3"))
    assert fake.requests[-1].jobs[0].settings.max_executions == 11
    client.job_defaults(max_unstarted_abandonments=6)
    client.enqueue(BuildReport("q3"))
    latest = fake.requests[-1].jobs[0].settings
    assert (latest.max_executions, latest.max_unstarted_abandonments) == (11, 6)
    assert first.max_executions == 4  # what went out before is not changed afterwards


def test_queue_and_priority_precedence(client: Client, job_service: tuple[FakeJobService, str]) -> None:
    fake = job_service[0]
    client.enqueue(PlainReport("q3"))
    assert (fake.requests[-1].jobs[0].queue, fake.requests[-1].jobs[0].priority) == ("reports", 2)
    client.configure_job(PlainReport).with_queue("fluent").with_priority(5)
    client.enqueue(PlainReport("q3"))
    assert (fake.requests[-1].jobs[0].queue, fake.requests[-1].jobs[0].priority) == ("fluent", 5)
    client.enqueue(PlainReport("q3"), queue="explicit", priority=-1)
    assert (fake.requests[-1].jobs[0].queue, fake.requests[-1].jobs[0].priority) == ("explicit", -1)


def test_configure_job_returns_the_same_builder(client: Client) -> None:
    assert client.configure_job(BuildReport) is client.configure_job(BuildReport)
    with pytest.raises(ArgumentError, match="not a job type"):
        client.configure_job(int)


@pytest.mark.parametrize(
    ("configure", "message"),
    [
        (lambda c: c.with_max_executions(0), "max_executions must be 1 to 100, got 0"),
        (lambda c: c.with_max_executions(101), "max_executions must be 1 to 100, got 101"),
        (lambda c: c.with_max_executions(True), "max_executions must be an int"),
        (lambda c: c.with_max_unstarted_abandonments(0), "max_unstarted_abandonments must be 1 to 100"),
        (
            lambda c: c.with_retry_delay(timedelta(seconds=2), timedelta(seconds=1)),
            "retry_initial_delay .* must not exceed retry_max_delay",
        ),
        (
            lambda c: c.with_retry_delay(timedelta(0), timedelta(seconds=1)),
            "retry_initial_delay must be 1 ms to 24 h",
        ),
        (
            lambda c: c.with_retry_delay(timedelta(seconds=1), timedelta(hours=24, milliseconds=1)),
            "retry_max_delay must be 1 ms to 24 h",
        ),
        (
            lambda c: c.with_retry_delay(timedelta(microseconds=1500), timedelta(seconds=1)),
            "retry_initial_delay must be a whole number of milliseconds",
        ),
        (
            lambda c: c.with_unstarted_recovery_delay(timedelta(seconds=31), timedelta(seconds=30)),
            "unstarted_initial_delay .* must not exceed",
        ),
        (
            lambda c: c.with_execution_timeout(timedelta(days=30, milliseconds=1)),
            "execution_timeout must be 1 ms to 30 days",
        ),
        (lambda c: c.with_execution_timeout(timedelta(0)), "execution_timeout must be 1 ms to 30 days"),
        (lambda c: c.with_queue(""), "queue must be a non-empty str"),
        (lambda c: c.with_priority(1.5), "priority must be an int"),
    ],
)
def test_fluent_validation(client: Client, configure: Any, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        configure(client.configure_job(BuildReport))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_executions": 0}, "max_executions must be 1 to 100"),
        ({"retry_delay": (timedelta(seconds=5), timedelta(seconds=1))}, "must not exceed"),
        ({"retry_delay": timedelta(seconds=5)}, "pair"),
        (
            {
                "retry_delay": (timedelta(seconds=1), timedelta(seconds=2)),
                "retry_max_delay": timedelta(seconds=3),
            },
            "not both",
        ),
        ({"execution_timeout": timedelta(days=31)}, "execution_timeout must be 1 ms to 30 days"),
        ({"unstarted_recovery_delay": (timedelta(0), timedelta(seconds=1))}, "unstarted_initial_delay"),
    ],
)
def test_job_defaults_validation(client: Client, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        client.job_defaults(**options)


def test_pair_inconsistent_across_levels_is_caught_at_enqueue(
    client: Client, job_service: tuple[FakeJobService, str]
) -> None:
    client.job_defaults(retry_initial_delay=timedelta(seconds=30))
    client.job_defaults(retry_max_delay=timedelta(seconds=40))
    with pytest.raises(ArgumentError, match="must not exceed"):
        client.job_defaults(retry_max_delay=timedelta(seconds=10))
    assert job_service[0].requests == []


def test_argument_errors_are_value_errors() -> None:
    assert issubclass(ArgumentError, ValueError)
