"""Metrics and structured logs without a server: what each fact records, label hygiene,
one SDK metric set per registry, and the JSON log line."""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument
from coordinator.metrics import OVERFLOW, CoordinatorMetrics, LabelValues, SeriesCap
from coordinator.service.effects import AttemptEnded, Effects, JobFinished, RunStarted
from coordinator.service.work import BatchAnswers, ResultAnswer
from worker_sdk import configure_logging
from worker_sdk._logging import JsonFormatter, job_log_context
from worker_sdk._metrics import WorkerMetrics

# kind: the kind of limit holding jobs back (a fixed few: "rate", ...), never a key.
BOUNDED_LABELS = {"queue", "wire_name", "outcome", "state", "grpc_method", "grpc_code", "reason", "kind"}
MAIL = {"queue": "mail", "wire_name": "mail.send"}


def value(metrics: CoordinatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_batch_records_waits_completions_runs_expiries_and_stale_results() -> None:
    metrics = CoordinatorMetrics()
    answers = BatchAnswers(
        started=[RunStarted("mail", "mail.send", 1_500)],
        ended=[
            AttemptEnded("mail", "mail.send", Outcome.SUCCEEDED, JobState.SUCCEEDED, ran_ms=250),
            AttemptEnded("mail", "mail.send", Outcome.RETRYABLE_FAILURE, JobState.SCHEDULED, ran_ms=40),
            AttemptEnded("mail", "mail.send", Outcome.PERMANENT_FAILURE, JobState.FAILED, ran_ms=10),
            AttemptEnded("mail", "mail.send", Outcome.ABANDONED, JobState.SCHEDULED, None, lease_lapsed=True),
            AttemptEnded(
                "mail", "mail.send", Outcome.UNSTARTED_ABANDONED, JobState.SCHEDULED, None, lease_lapsed=True
            ),
            AttemptEnded("mail", "mail.send", Outcome.RELEASED, JobState.AVAILABLE, None),
        ],
        # Jobs are counted as completed from the terminal path's facts, one per job.
        finished=[
            JobFinished("j1", "mail", "mail.send", JobState.SUCCEEDED),
            JobFinished("j3", "mail", "mail.send", JobState.FAILED),
        ],
        results=[
            ResultAnswer("a1", True),
            ResultAnswer("a2", False, reason="superseded attempt"),
            ResultAnswer("a3", False, error=InvalidArgument("output", "too large")),  # refused, not stale
        ],
    )
    metrics.observe(answers)

    assert value(metrics, "runwick_job_wait_seconds_sum", **MAIL) == 1.5
    assert value(metrics, "runwick_jobs_completed_total", **MAIL, outcome="succeeded") == 1
    assert value(metrics, "runwick_jobs_completed_total", **MAIL, outcome="failed") == 1
    assert value(metrics, "runwick_jobs_completed_total", **MAIL, outcome="scheduled") is None
    assert value(metrics, "runwick_job_run_duration_seconds_sum", **MAIL, outcome="succeeded") == 0.25
    assert value(metrics, "runwick_job_run_duration_seconds_count", **MAIL, outcome="retryable_failure") == 1
    assert value(metrics, "runwick_job_run_duration_seconds_count", **MAIL, outcome="abandoned") is None
    assert value(metrics, "runwick_leases_expired_total", **MAIL) == 2
    assert value(metrics, "runwick_unstarted_abandonments_total", **MAIL) == 1
    assert value(metrics, "runwick_stale_results_total") == 1


def test_a_batch_of_many_jobs_records_each_value_under_its_own_series() -> None:
    """The series of a batch are looked up once per label set: every value still lands in
    its own queue's and type's series, and outcomes stay apart."""
    metrics = CoordinatorMetrics()
    other = {"queue": "sms", "wire_name": "sms.send"}
    metrics.observe(
        Effects(
            started=[RunStarted("mail", "mail.send", ms) for ms in (100, 200, 300)]
            + [RunStarted("sms", "sms.send", 1_000)],
            ended=[
                AttemptEnded("mail", "mail.send", Outcome.SUCCEEDED, JobState.SUCCEEDED, ran_ms=10),
                AttemptEnded("sms", "sms.send", Outcome.SUCCEEDED, JobState.SUCCEEDED, ran_ms=40),
                AttemptEnded("mail", "mail.send", Outcome.SUCCEEDED, JobState.SUCCEEDED, ran_ms=30),
                AttemptEnded("mail", "mail.send", Outcome.PERMANENT_FAILURE, JobState.FAILED, ran_ms=50),
            ],
        )
    )
    assert value(metrics, "runwick_job_wait_seconds_count", **MAIL) == 3
    assert value(metrics, "runwick_job_wait_seconds_sum", **MAIL) == pytest.approx(0.6)
    assert value(metrics, "runwick_job_wait_seconds_sum", **other) == 1.0
    runs = "runwick_job_run_duration_seconds"
    assert value(metrics, runs + "_count", **MAIL, outcome="succeeded") == 2
    assert value(metrics, runs + "_sum", **MAIL, outcome="succeeded") == pytest.approx(0.04)
    assert value(metrics, runs + "_sum", **MAIL, outcome="permanent_failure") == pytest.approx(0.05)
    assert value(metrics, runs + "_sum", **other, outcome="succeeded") == pytest.approx(0.04)


def test_queue_gauges_have_series_only_for_queues_with_jobs_or_workers() -> None:
    metrics = CoordinatorMetrics()
    metrics.workers([("mail", "default"), ("mail",)])
    assert value(metrics, "runwick_connected_workers", queue="mail") == 2
    metrics.queue_stats({("mail", "available"): 3, ("mail", "running"): 1}, {"mail": 10_000}, now_ms=70_000)
    assert value(metrics, "runwick_queue_depth", queue="mail", state="available") == 3
    assert value(metrics, "runwick_queue_depth", queue="mail", state="scheduled") == 0
    assert value(metrics, "runwick_queue_depth", queue="default", state="available") is None  # no jobs
    assert value(metrics, "runwick_queue_oldest_available_job_age_seconds", queue="mail") == 60
    assert value(metrics, "runwick_queue_depth", queue="mail", state="succeeded") is None  # never counted

    metrics.workers([("default",)])
    metrics.queue_stats({("mail", "available"): 0}, {}, now_ms=80_000)  # the queue emptied
    assert value(metrics, "runwick_connected_workers", queue="mail") is None
    assert value(metrics, "runwick_connected_workers", queue="default") == 1
    assert value(metrics, "runwick_queue_depth", queue="mail", state="available") is None
    assert value(metrics, "runwick_queue_oldest_available_job_age_seconds", queue="mail") is None


def test_a_paused_queue_says_so_so_that_its_waiting_jobs_fire_no_alert() -> None:
    metrics = CoordinatorMetrics()
    depths = {("mail", "available"): 3, ("held", "available"): 9}
    metrics.queue_stats(depths, {"mail": 10_000, "held": 0}, now_ms=70_000, paused=frozenset({"held"}))
    assert value(metrics, "runwick_queue_paused", queue="held") == 1
    assert value(metrics, "runwick_queue_paused", queue="mail") == 0
    metrics.queue_stats({("mail", "available"): 3}, {"mail": 10_000}, now_ms=80_000)  # held resumed, emptied
    assert value(metrics, "runwick_queue_paused", queue="held") is None
    assert value(metrics, "runwick_queue_paused", queue="mail") == 0


def series(metrics: CoordinatorMetrics, name: str) -> list[dict[str, str]]:
    return [
        sample.labels
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    ]


def test_queue_and_wire_name_labels_take_a_bounded_number_of_values() -> None:
    metrics = CoordinatorMetrics(max_label_values=3)
    metrics.enqueued_many((f"q{n % 5}", f"w{n}") for n in range(10))
    enqueued = series(metrics, "runwick_jobs_enqueued_total")
    assert {labels["queue"] for labels in enqueued} == {"q0", "q1", "q2", OVERFLOW}
    assert {labels["wire_name"] for labels in enqueued} == {"w0", "w1", "w2", OVERFLOW}
    assert sum(value(metrics, "runwick_jobs_enqueued_total", **labels) or 0 for labels in enqueued) == 10
    # The gauges fold the same way: overflow depths add up, the oldest age is the largest.
    metrics.queue_stats(
        {("q0", "available"): 1, ("q3", "available"): 2, ("q4", "available"): 5, ("q9", "running"): 1},
        {"q3": 50_000, "q4": 40_000},
        now_ms=100_000,
    )
    assert value(metrics, "runwick_queue_depth", queue=OVERFLOW, state="available") == 7
    assert value(metrics, "runwick_queue_depth", queue=OVERFLOW, state="running") == 1
    assert value(metrics, "runwick_queue_oldest_available_job_age_seconds", queue=OVERFLOW) == 60
    assert {labels["queue"] for labels in series(metrics, "runwick_queue_depth")} == {"q0", OVERFLOW}
    metrics.workers([("q1", "q7", "q8")])  # one stream: counted once under the overflow value
    assert value(metrics, "runwick_connected_workers", queue=OVERFLOW) == 1
    assert value(metrics, "runwick_connected_workers", queue="q1") == 1


def test_a_transactions_jobs_are_each_counted_once_in_their_bounded_series() -> None:
    """Counters go up once per series and transaction, by the number of its jobs."""
    metrics = CoordinatorMetrics(max_label_values=2)
    metrics.enqueued_many([("q0", "w"), ("q0", "w"), ("q1", "w"), ("q2", "w"), ("q3", "w")])
    assert value(metrics, "runwick_jobs_enqueued_total", queue="q0", wire_name="w") == 2
    assert value(metrics, "runwick_jobs_enqueued_total", queue="q1", wire_name="w") == 1
    assert value(metrics, "runwick_jobs_enqueued_total", queue=OVERFLOW, wire_name="w") == 2
    finished = [JobFinished(f"j{n}", f"q{n % 4}", "w", JobState.SUCCEEDED) for n in range(8)]
    metrics.observe(Effects(finished=[*finished, JobFinished("j8", "q0", "w", JobState.FAILED)]))
    completed = "runwick_jobs_completed_total"
    assert value(metrics, completed, queue="q0", wire_name="w", outcome="succeeded") == 2
    assert value(metrics, completed, queue="q1", wire_name="w", outcome="succeeded") == 2
    assert value(metrics, completed, queue=OVERFLOW, wire_name="w", outcome="succeeded") == 4
    assert value(metrics, completed, queue="q0", wire_name="w", outcome="failed") == 1
    metrics.enqueued_many([("q0", "w"), ("q9", "w")])  # the next transaction adds to them
    assert value(metrics, "runwick_jobs_enqueued_total", queue="q0", wire_name="w") == 3
    assert value(metrics, "runwick_jobs_enqueued_total", queue=OVERFLOW, wire_name="w") == 3
    metrics.enqueued_many([])
    assert len(series(metrics, "runwick_jobs_enqueued_total")) == 3


def test_a_label_needs_room_for_one_value() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LabelValues(0)


def wrappers(owner: object) -> list[MetricWrapperBase]:
    return [attribute for attribute in vars(owner).values() if isinstance(attribute, MetricWrapperBase)]


@pytest.mark.parametrize(
    "owner", [CoordinatorMetrics(), WorkerMetrics(CollectorRegistry())], ids=["coordinator", "sdk"]
)
def test_metrics_use_base_units_and_bounded_labels(owner: object) -> None:
    """Never job or attempt IDs, never error text; durations in seconds (docs/metrics.md)."""
    found = wrappers(owner)
    assert len(found) >= 6
    for metric in found:
        name = metric._name
        assert name.startswith("runwick_"), name
        assert set(metric._labelnames) <= BOUNDED_LABELS, name
        if metric._type == "histogram":
            assert name.endswith("_seconds"), name
        if metric._type == "gauge":
            assert not name.endswith("_total"), name


def test_sdk_metrics_are_shared_per_registry_default_the_global_one() -> None:
    mine = CollectorRegistry()
    assert WorkerMetrics.for_registry(mine) is WorkerMetrics.for_registry(mine)
    assert WorkerMetrics.for_registry(mine) is not WorkerMetrics.for_registry(CollectorRegistry())
    assert WorkerMetrics.for_registry() is WorkerMetrics.for_registry(REGISTRY)


def test_sdk_run_metrics_count_runs_through_series_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    looked_up: list[tuple[str, ...]] = []
    for metric in (metrics.in_flight, metrics.jobs, metrics.handler_duration):

        def counting(*labels: str, _labels: Any = metric.labels, _name: str = metric._name) -> Any:
            looked_up.append((_name, *labels))
            return _labels(*labels)

        monkeypatch.setattr(metric, "labels", counting)
    in_flight = metrics.run_in_flight("mail", "mail.send")
    assert metrics.run_in_flight("mail", "mail.send") is in_flight
    in_flight.inc()
    in_flight.inc()
    in_flight.dec()
    metrics.run_finished("mail", "mail.send", "succeeded", 0.25)
    metrics.run_finished("mail", "mail.send", "succeeded", 0.5)
    metrics.run_finished("mail", "mail.send", "no_result", 30.0)
    metrics.run_finished("jobs", "report.build", "succeeded", 1.0)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("runwick_worker_jobs_in_flight", **MAIL) == 1
    assert sample("runwick_worker_jobs_total", **MAIL, outcome="succeeded") == 2
    assert sample("runwick_worker_jobs_total", **MAIL, outcome="no_result") == 1
    report = {"queue": "jobs", "wire_name": "report.build"}
    assert sample("runwick_worker_jobs_total", **report, outcome="succeeded") == 1
    duration = "runwick_worker_handler_duration_seconds"
    assert sample(f"{duration}_sum", **MAIL, outcome="succeeded") == 0.75
    assert sample(f"{duration}_count", **MAIL, outcome="no_result") == 1
    assert sample(f"{duration}_bucket", **MAIL, outcome="no_result", le="10.0") == 0
    assert sample(f"{duration}_bucket", **MAIL, outcome="no_result", le="30.0") == 1
    assert len(looked_up) == len(set(looked_up)) == 7  # 1 gauge series, 3 x (counter, histogram)


def test_json_lines_carry_the_run_context_and_extra_fields() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "charged %s", ("order-1",), None)
    with job_log_context(job_id="j1", attempt_id="a1"):
        inside = json.loads(formatter.format(record))
    outside = json.loads(formatter.format(record))
    assert inside["job_id"] == "j1" and inside["attempt_id"] == "a1"
    assert inside["message"] == "charged order-1" and inside["level"] == "INFO" and inside["logger"] == "app"
    assert "job_id" not in outside

    warning = logging.LogRecord("runwick", logging.WARNING, __file__, 1, "lost %s", ("a2",), None)
    warning.attempt_id = "a2"
    assert json.loads(formatter.format(warning))["attempt_id"] == "a2"
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord("runwick", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "RuntimeError: boom" in json.loads(formatter.format(failed))["exception"]


def test_configure_logging_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure_logging("INFO", "xml")


def series_per_family(metrics: CoordinatorMetrics) -> dict[str, int]:
    """Label combinations per metric (a histogram's buckets of one combination count once)."""
    return {
        family.name: len(
            {
                tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
                for sample in family.samples
                if not sample.name.endswith("_created")
            }
        )
        for family in metrics.registry.collect()
        if family.name.startswith("runwick_")
    }


def test_no_metric_has_more_series_than_its_cap_whatever_queues_and_wire_names_come() -> None:
    """60 queues x 60 wire names, each label within its own 100 values: the per-label
    cap alone left 3,600 series per metric (times outcomes)."""
    metrics = CoordinatorMetrics(max_series=100)
    pairs = [(f"q{q}", f"w{w}") for q in range(60) for w in range(60)]
    metrics.enqueued_many(pairs)
    run_outcomes = [o for o in Outcome if o is not Outcome.UNSTARTED_ABANDONED]
    metrics.observe(
        Effects(
            started=[RunStarted(q, w, 10) for q, w in pairs],
            ended=[
                AttemptEnded(q, w, outcome, JobState.SCHEDULED, ran_ms=5, lease_lapsed=True)
                for n, (q, w) in enumerate(pairs)
                for outcome in (run_outcomes[n % len(run_outcomes)], Outcome.UNSTARTED_ABANDONED)
            ],
            finished=[
                JobFinished(f"j{n}", q, w, state)
                for n, (q, w) in enumerate(pairs)
                for state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
            ],
        )
    )
    metrics.workers([[f"q{q}" for q in range(60)], [f"q{q}" for q in range(30, 90)]])
    metrics.queue_stats(
        {(f"q{q}", "available"): 1 for q in range(99)}, {f"q{q}": 0 for q in range(99)}, now_ms=1
    )
    for method in range(150):
        metrics.rpc(f"runwick.v1.Svc/M{method}", "OK", 0.01)

    counts = series_per_family(metrics)
    assert max(counts.values()) <= 100, counts
    # Every job is still counted: the pairs past a metric's room under (other) in both.
    enqueued = series(metrics, "runwick_jobs_enqueued_total")
    assert sum(value(metrics, "runwick_jobs_enqueued_total", **labels) or 0 for labels in enqueued) == 3600
    assert value(metrics, "runwick_jobs_enqueued_total", queue=OVERFLOW, wire_name=OVERFLOW) == 3600 - 99
    assert value(metrics, "runwick_job_wait_seconds_count", queue=OVERFLOW, wire_name=OVERFLOW) == 3600 - 99
    assert value(metrics, "runwick_queue_depth", queue=OVERFLOW, state="available") == 99 - (100 // 5 - 1)


def test_a_pair_keeps_all_its_outcomes_in_one_metric_or_none() -> None:
    """A metric split by outcome admits whole pairs, so a pair's failure share is never
    made of some outcomes in its own series and others under (other)."""
    metrics = CoordinatorMetrics(max_series=18)  # room for 18 // 9 - 1 = 1 pair in runs
    ended = [
        AttemptEnded(f"q{n}", "w", outcome, JobState.SCHEDULED, ran_ms=5)
        for n in range(3)
        for outcome in (Outcome.SUCCEEDED, Outcome.PERMANENT_FAILURE)
    ]
    metrics.observe(Effects(ended=ended))
    runs = "runwick_job_run_duration_seconds_count"
    assert value(metrics, runs, queue="q0", wire_name="w", outcome="succeeded") == 1
    assert value(metrics, runs, queue="q0", wire_name="w", outcome="permanent_failure") == 1
    assert value(metrics, runs, queue=OVERFLOW, wire_name=OVERFLOW, outcome="succeeded") == 2
    assert value(metrics, runs, queue=OVERFLOW, wire_name=OVERFLOW, outcome="permanent_failure") == 2
    assert value(metrics, runs, queue="q1", wire_name="w", outcome="succeeded") is None


def test_a_metric_cap_needs_room_for_a_pair_of_every_outcome() -> None:
    with pytest.raises(ValueError, match="at least 18"):
        CoordinatorMetrics(max_series=17)
    with pytest.raises(ValueError, match="at least 1 series"):
        SeriesCap(0)


def test_help_texts_speak_plainly_without_rule_numbers() -> None:
    """Operators read HELP texts in Prometheus and Grafana, where the rule numbers of
    docs/rules.md mean nothing."""
    registry = CollectorRegistry()
    CoordinatorMetrics(registry)
    WorkerMetrics(registry)
    helps = [family.documentation for family in registry.collect()]
    assert helps and not [text for text in helps if re.search(r"\bR-\d+", text)]
