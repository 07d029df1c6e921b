"""What an outbox row holds: the encoded ``NewJob`` a ``Client`` would send for the same
``EnqueueItem``, an idempotency key (the item's own, or one made at write time), and
refusals at write time for what the coordinator would refuse."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from worker_sdk import ArgumentError, Client, EnqueueItem, PayloadTooLarge, job
from worker_sdk.outbox import OutboxEncoder, OutboxLimits, RelayConfig
from worker_sdk.outbox._rows import KEY_PREFIX, decode_job

PARENT = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
CHOSEN = "0193a7c2-5b1e-7c3d-9f00-ffffffffffff"


@job("outbox.rows.order", version=2, queue="orders", priority=3, max_executions=5)
@dataclass
class Order:
    order_id: str
    note: str = ""


@dataclass
class NotAJob:
    n: int


def test_a_row_is_the_job_a_client_would_send_plus_its_key() -> None:
    item = EnqueueItem(
        Order("o-1"),
        run_at=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
        priority=7,
        queue="mail",
        parents=[PARENT],
        idempotency_key="order-o-1",
        job_id=CHOSEN,
        unique_key="u-1",
    )
    (row,) = OutboxEncoder().rows([item])
    with Client("127.0.0.1:1") as client:  # connects lazily: nothing is sent
        expected = client._enqueue_request([item]).jobs[0]
    assert decode_job(row.job) == expected
    assert row.idempotency_key == "order-o-1"


def test_settings_levels_apply_as_a_clients_do() -> None:
    encoder = OutboxEncoder()
    encoder.job_defaults(execution_timeout=timedelta(seconds=30))
    encoder.configure_job(Order).with_max_executions(9)
    (row,) = encoder.rows([Order("o-2")])
    settings = decode_job(row.job).settings
    assert settings.max_executions == 9
    assert settings.execution_timeout.ToTimedelta() == timedelta(seconds=30)


def test_an_item_without_a_key_gets_one_made_now_and_different_each_time() -> None:
    first, second = OutboxEncoder().rows([Order("o-3"), Order("o-3")])
    assert first.idempotency_key.startswith(KEY_PREFIX)
    assert first.idempotency_key != second.idempotency_key
    assert decode_job(first.job).idempotency_key == first.idempotency_key


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (EnqueueItem(Order("x" * 70_000)), "over the limit of 65536"),
        (EnqueueItem(Order("o"), queue="no spaces"), "not a valid name"),
        (EnqueueItem(Order("o"), parents=[f"p-{i}" for i in range(65)]), "at most 64"),
        (EnqueueItem(Order("o"), idempotency_key="k" * 257), "idempotency_key is 257 characters"),
        (EnqueueItem(Order("o"), unique_key="k" * 257), "unique_key is 257 characters"),
        (EnqueueItem(Order("o"), priority="high"), "priority must be an int"),  # type: ignore[arg-type]
        (EnqueueItem(Order("o"), run_at=datetime(2030, 1, 1)), "timezone-aware"),
        (EnqueueItem(NotAJob(1)), "@job"),
    ],
)
def test_what_the_coordinator_would_refuse_is_refused_when_written(item: EnqueueItem, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        OutboxEncoder().rows([item])


def test_a_payload_over_the_limit_says_its_size_and_the_limit() -> None:
    with pytest.raises(PayloadTooLarge) as raised:
        OutboxEncoder(OutboxLimits(max_payload_bytes=100)).rows([Order("x" * 200)])
    assert raised.value.wire_name == "outbox.rows.order"
    assert raised.value.limit_bytes == 100
    assert raised.value.size_bytes is not None and raised.value.size_bytes > 200


def test_a_bad_item_in_a_batch_is_named_by_its_index_and_nothing_is_returned() -> None:
    with pytest.raises(ArgumentError, match=r"^job 1: .*not a valid name"):
        OutboxEncoder().rows([Order("a"), EnqueueItem(Order("b"), queue="a/b"), Order("c")])


def test_a_batch_is_bounded_like_the_coordinators() -> None:
    with pytest.raises(ArgumentError, match="3 jobs in one outbox write; at most 2"):
        OutboxEncoder(OutboxLimits(max_items=2)).rows([Order("a")] * 3)
    with pytest.raises(ArgumentError, match="at least one job"):
        OutboxEncoder().rows([])


@pytest.mark.parametrize("field", ["max_payload_bytes", "max_parents", "max_key_length", "max_items"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_limits_must_be_positive_ints(field: str, value: object) -> None:
    with pytest.raises(ArgumentError, match=field):
        OutboxLimits(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"batch_size": 0}, "batch_size must be 1-500"),
        ({"batch_size": 501}, "batch_size must be 1-500"),
        ({"poll_interval_s": 0}, "poll_interval_s must be more than 0"),
        ({"rpc_timeout_s": float("nan")}, "rpc_timeout_s must be a finite number"),
        ({"backoff_initial_s": 2.0, "backoff_max_s": 1.0}, "must not exceed"),
        ({"notify_channel": 'x"; DROP TABLE t; --'}, "notify_channel must be"),
        ({"notify_channel": "c" * 64}, "notify_channel must be"),
    ],
)
def test_relay_config_refuses_bad_values(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        RelayConfig(**settings)  # type: ignore[arg-type]


def test_backoff_doubles_up_to_its_cap() -> None:
    config = RelayConfig(backoff_initial_s=0.1, backoff_max_s=0.5)
    waits = [config.backoff_initial_s]
    for _ in range(4):
        waits.append(config.next_backoff(waits[-1]))
    assert waits == [0.1, 0.2, 0.4, 0.5, 0.5]
