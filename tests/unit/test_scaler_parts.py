"""The autoscaling pieces without a server: the desired-slots gauge an HPA scales by, and
the checks on a KEDA trigger's metadata (docs/autoscaling.md)."""

from __future__ import annotations

import pytest

from coordinator.api.scaler import parse_trigger
from coordinator.config import ScalerLimits
from coordinator.errors import InvalidArgument
from coordinator.metrics import OVERFLOW, CoordinatorMetrics


def slots(metrics: CoordinatorMetrics, queue: str) -> float | None:
    return metrics.registry.get_sample_value("runwick_queue_desired_slots", {"queue": queue})


def test_the_desired_slots_gauge_counts_leased_jobs_always_and_available_ones_unless_paused() -> None:
    metrics = CoordinatorMetrics()
    depths = {
        ("mail", "available"): 3,
        ("mail", "running"): 2,
        ("mail", "reserved"): 1,
        ("mail", "scheduled"): 50,  # not due: the gauge has no horizon
        ("mail", "waiting"): 7,  # waits for its parents
        ("held", "available"): 9,
        ("held", "running"): 4,
    }
    metrics.queue_stats(depths, {}, now_ms=1_000, paused=frozenset({"held"}))
    assert slots(metrics, "mail") == 6
    assert slots(metrics, "held") == 4  # paused: only the jobs whose workers hold leases
    metrics.queue_stats({("mail", "available"): 1}, {}, now_ms=2_000)  # held emptied
    assert slots(metrics, "mail") == 1
    assert slots(metrics, "held") is None


def test_the_desired_slots_gauge_leaves_out_what_the_controls_hold_back() -> None:
    metrics = CoordinatorMetrics()
    depths = {("keyed", "available"): 9, ("keyed", "running"): 2, ("held", "available"): 4}
    held = {("keyed", "key_limit"): 5, ("keyed", "rate"): 1, ("held", "queue_paused"): 4}
    runnable = {"keyed": 3, "held": 0}
    metrics.queue_stats(depths, {}, now_ms=1_000, paused=frozenset({"held"}), held=held, runnable=runnable)
    assert slots(metrics, "keyed") == 5  # 2 running, 3 runnable of 9
    assert slots(metrics, "held") == 0
    gauge = "runwick_queue_held_back_jobs"
    assert metrics.registry.get_sample_value(gauge, {"queue": "keyed", "kind": "key_limit"}) == 5
    assert metrics.registry.get_sample_value(gauge, {"queue": "held", "kind": "queue_paused"}) == 4
    metrics.queue_stats({("keyed", "running"): 2}, {}, now_ms=2_000, held={}, runnable={})  # the backlog ran
    assert slots(metrics, "keyed") == 2
    assert metrics.registry.get_sample_value(gauge, {"queue": "keyed", "kind": "key_limit"}) is None


def test_the_desired_slots_gauge_stays_within_the_queue_series_cap() -> None:
    metrics = CoordinatorMetrics(max_label_values=2)
    metrics.queue_stats({(f"q{n}", "available"): 1 for n in range(20)}, {}, now_ms=1_000)
    samples = [
        sample.labels["queue"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "runwick_queue_desired_slots"
    ]
    assert set(samples) == {"q0", "q1", OVERFLOW}
    assert slots(metrics, OVERFLOW) == 18


LIMITS = ScalerLimits(max_wire_names=3, max_horizon_s=3600, max_slots_per_replica=50)


def test_a_trigger_reads_its_queue_wire_names_horizon_and_slots_per_replica() -> None:
    trigger = parse_trigger(
        {
            "queue": "mail",
            "wireNames": "mail.send, mail.bounce,mail.send",
            "horizonSeconds": "600",
            "slotsPerReplica": "8",
            "scalerAddress": "runwick:7236",
        },
        LIMITS,
        256,
    )
    assert trigger.target.queue == "mail"
    assert trigger.target.wire_names == ("mail.send", "mail.bounce")
    assert trigger.target.horizon_ms == 600_000
    assert trigger.slots_per_replica == 8
    bare = parse_trigger({"queue": "mail"}, LIMITS, 256)
    assert (bare.target.wire_names, bare.target.horizon_ms, bare.slots_per_replica) == ((), 0, 1)


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({}, "scalerMetadata.queue"),
        ({"queue": ""}, "scalerMetadata.queue"),
        ({"queue": "a b"}, "scalerMetadata.queue"),
        ({"queue": "q" * 300}, "scalerMetadata.queue"),
        ({"queue": "mail", "horizonSeconds": "-1"}, "scalerMetadata.horizonSeconds"),
        ({"queue": "mail", "horizonSeconds": "3601"}, "scalerMetadata.horizonSeconds"),
        ({"queue": "mail", "horizonSeconds": "9" * 5000}, "scalerMetadata.horizonSeconds"),
        ({"queue": "mail", "horizonSeconds": "1e3"}, "scalerMetadata.horizonSeconds"),
        ({"queue": "mail", "horizonSeconds": "٣"}, "scalerMetadata.horizonSeconds"),  # an Arabic-Indic 3
        ({"queue": "mail", "slotsPerReplica": "0"}, "scalerMetadata.slotsPerReplica"),
        ({"queue": "mail", "slotsPerReplica": "51"}, "scalerMetadata.slotsPerReplica"),
        ({"queue": "mail", "wireNames": "a,b,c,d"}, "scalerMetadata.wireNames"),
        ({"queue": "mail", "wireNames": "a,,b"}, "scalerMetadata.wireNames"),
        ({"queue": "mail", "wireNames": "," * 100_000}, "scalerMetadata.wireNames"),
    ],
)
def test_a_bad_trigger_is_refused_naming_its_key(metadata: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_trigger(metadata, LIMITS, 256)
    assert refused.value.field == field
