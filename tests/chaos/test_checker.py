"""The chaos checker on hand-made histories: a clean one passes every invariant, and for
each invariant a history that breaks it is caught. Also the history files (a cut last
line is tolerated) and the re-check command."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import check as check_command
from tests.chaos.checker import INVARIANTS, Model, Report, check, nominal_delay_ms
from tests.chaos.history import History, encode_event, load_history, merge, parse_jsonl

pytestmark = pytest.mark.chaos

HEADER = {"lease_ms": 2_000, "maintenance_ms": 200, "slack_ms": 1_000, "clock_tol_ms": 10, "seed": 7}


def job(job_id: str, key: str, **fields: Any) -> dict[str, Any]:
    record = {
        "id": job_id,
        "wire_name": "chaos.task",
        "state": "succeeded",
        "generation": 1,
        "executions": 1,
        "max_executions": 3,
        "retry_initial_ms": 100,
        "retry_max_ms": 800,
        "unstarted_initial_ms": 100,
        "unstarted_max_ms": 400,
        "max_unstarted": 5,
        "idempotency_key": key,
        "output": None,
        "finished_at": None,
        "last_error_code": None,
        "cancel_requested": False,
        "concurrency_key": "t1",
    }
    record.update(fields)
    return record


def attempt(attempt_id: str, job_id: str, claimed: int, **fields: Any) -> dict[str, Any]:
    record = {
        "id": attempt_id,
        "job": job_id,
        "generation": 1,
        "worker_id": "w1",
        "execution": 0,
        "claimed_at": claimed,
        "started_at": None,
        "finished_at": None,
        "outcome": None,
        "error_code": None,
        "retry_delay_ms": None,
    }
    record.update(fields)
    return record


def ev(kind: str, wall: float, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "wall": wall, "mono": wall / 1000, **fields}


def clean_events() -> list[dict[str, Any]]:
    """Three jobs. j1: one attempt on w1, succeeds. j2: its first attempt runs on w2, w2
    is killed at 3000, the lease (last seen at 5000) lapses and is recovered at 5100 with
    an 80 ms retry delay; the second attempt, on w1, succeeds. j3: cancelled before any
    claim. j1 and j2 share the concurrency key t1 (j3 has t2), under a per-key limit of
    1 and a queue limit of 2 set at 1010: their attempts never overlap."""
    return [
        ev("coordinator_up", 500, replica="a", target="127.0.0.1:1"),
        ev("worker_up", 600, worker_id="w1", proxy="p0"),
        ev("worker_up", 600, worker_id="w2", proxy="p1"),
        ev(
            "enqueue",
            1_000,
            producer=0,
            keys=["k1", "k2", "k3"],
            ids=["j1", "j2", "j3"],
            concurrency_keys=["t1", "t1", "t2"],
            tries=1,
        ),
        ev("queue_rate", 1_010, count=2, period_ms=1_000),
        ev("queue_key_limit", 1_010, limit=1),
        ev("queue_limit", 1_010, limit=2),
        ev("cancel", 1_020, job="j3", ok=True, state="cancelled", generation=1),
        ev("start", 1_100, worker_id="w1", job="j1", attempt="a1", execution=1, generation=1),
        ev("finish", 1_200, worker_id="w1", job="j1", attempt="a1", result="returned", output="a1|k1"),
        ev("ack", 1_210, worker_id="w1", attempt="a1", status="accepted", outcome="succeeded"),
        ev("start", 2_020, worker_id="w2", job="j2", attempt="b1", execution=1, generation=1),
        ev("poll", 2_500, replica="a", held=[["j2", "b1", "running", 4_000]]),
        ev("poll", 2_900, replica="a", held=[["j2", "b1", "running", 5_000]]),
        ev("fault", 3_000, id=1, fault="kill9_worker", worker_id="w2", proxy="p1"),
        ev("poll", 4_900, replica="a", held=[["j2", "b1", "running", 5_000]]),
        ev("heal", 3_500, id=1, worker_id="w3"),
        ev("start", 5_320, worker_id="w1", job="j2", attempt="b2", execution=2, generation=1),
        ev("finish", 5_400, worker_id="w1", job="j2", attempt="b2", result="returned", output="b2|k2"),
        ev("ack", 5_410, worker_id="w1", attempt="b2", status="accepted", outcome="succeeded"),
        ev("final_job", 9_000, job=job("j1", "k1", output="a1|k1", finished_at=1_205)),
        ev("final_job", 9_000, job=job("j2", "k2", output="b2|k2", executions=2, finished_at=5_405)),
        ev(
            "final_job",
            9_000,
            job=job("j3", "k3", state="cancelled", executions=0, finished_at=1_010, concurrency_key="t2"),
        ),
        ev(
            "final_attempt",
            9_000,
            attempt=attempt(
                "a1", "j1", 1_050, started_at=1_090, finished_at=1_205, outcome="succeeded", execution=1
            ),
        ),
        ev(
            "final_attempt",
            9_000,
            attempt=attempt(
                "b1",
                "j2",
                2_000,
                worker_id="w2",
                started_at=2_010,
                finished_at=5_100,
                outcome="abandoned",
                execution=1,
                retry_delay_ms=80,
            ),
        ),
        ev(
            "final_attempt",
            9_000,
            attempt=attempt(
                "b2", "j2", 5_300, started_at=5_310, finished_at=5_405, outcome="succeeded", execution=2
            ),
        ),
    ]


def history(events: list[dict[str, Any]], **header: Any) -> History:
    return History({**HEADER, **header}, events)


def violated(report: Report) -> set[str]:
    return {v.invariant for v in report.violations}


def find(events: list[dict[str, Any]], kind: str, **match: Any) -> dict[str, Any]:
    """The one event of ``kind`` whose fields (or record's fields) match."""
    for event in events:
        if event["kind"] != kind:
            continue
        record = (
            event.get("job")
            if kind == "final_job"
            else event.get("attempt")
            if kind == "final_attempt"
            else event
        )
        if isinstance(record, dict) and all(record.get(k) == v for k, v in match.items()):
            return record
    raise AssertionError(f"no {kind} event matching {match}")


def mutated(**header: Any) -> tuple[list[dict[str, Any]], Any]:
    events = copy.deepcopy(clean_events())
    return events, lambda: check(history(events, **header))


def test_the_clean_history_passes_every_invariant_and_checks_something_with_each():
    report = check(history(clean_events()))

    assert report.ok, report.summary()
    assert set(report.results) == set(INVARIANTS)
    for name, result in report.results.items():
        assert result.checked >= 1, name
    assert report.faults == {"kill9_worker": 1}
    assert report.operations["jobs acked"] == 3
    summary = report.summary()
    assert "violations: 0" in summary and "kill9_worker 1" in summary


# -- each invariant broken ------------------------------------------------------------------


def test_more_starts_than_a_queue_rate_allows_are_caught():
    events, run = mutated()
    find(events, "queue_rate", period_ms=1_000)["count"] = 1  # a1 and b1 start 920 ms apart
    assert violated(run()) == {"queue_rate_respected"}


def test_two_attempts_of_one_key_holding_at_once_over_its_limit_are_caught():
    events, run = mutated()
    find(events, "final_attempt", id="a1")["finished_at"] = 2_500  # j1 still held when b1 is claimed
    report = run()
    assert violated(report) == {"key_limit_respected"}
    [violation] = report.violations
    assert violation.attempt == "b1"
    assert "key 't1': 2 attempts held jobs at 2000" in violation.message
    assert "['a1', 'b1']" in violation.message


def test_more_attempts_of_the_queue_holding_at_once_than_its_limit_are_caught():
    events, run = mutated()
    find(events, "queue_limit")["limit"] = 1
    find(events, "final_job", id="j2")["concurrency_key"] = "t3"
    find(events, "enqueue")["concurrency_keys"][1] = "t3"
    find(events, "final_attempt", id="a1")["finished_at"] = 2_500
    assert violated(run()) == {"queue_limit_respected"}


def test_an_overlap_within_the_clock_tolerance_is_fine():
    """A claim's and a result's timestamps are taken before their transactions commit."""
    events, run = mutated()
    find(events, "final_attempt", id="a1")["finished_at"] = 2_005  # tolerance 10 ms
    report = run()
    assert report.ok, report.summary()
    assert "most held at once: t1 1" in report.summary()


def test_a_killed_workers_attempt_holds_its_key_until_its_lease_is_recovered():
    """b1's worker was killed at 3000 and its lease expired at 5000, but the
    coordinator recovered it only at 5100: until then it counts, as in the claim."""
    events, run = mutated()
    find(events, "enqueue")["keys"].append("k4")
    find(events, "enqueue")["ids"].append("j4")
    find(events, "enqueue")["concurrency_keys"].append("t1")
    events.append(ev("final_job", 9_000, job=job("j4", "k4", state="cancelled", executions=0)))
    d1 = attempt("d1", "j4", 5_050, finished_at=5_060, outcome="cancelled")
    events.append(ev("final_attempt", 9_000, attempt=d1))
    report = run()
    assert violated(report) == {"key_limit_respected"}
    assert report.violations[0].attempt == "d1"

    d1.update(claimed_at=5_150, finished_at=5_160)  # after the recovery: the slot was free
    assert run().ok


def test_claims_before_a_limit_was_set_are_not_held_to_it():
    events, run = mutated()
    find(events, "final_attempt", id="a1")["finished_at"] = 2_500
    find(events, "queue_key_limit")["wall"] = 2_200  # set after b1's claim at 2000
    assert run().ok


def test_a_claim_after_the_limit_while_earlier_claims_still_hold_is_caught():
    """Lowering a limit stops nothing that runs, but no new claim of the key is allowed
    until it is below the limit: jobs claimed before the limit count as holders."""
    events, run = mutated()
    find(events, "final_attempt", id="a1")["finished_at"] = 2_500
    find(events, "queue_key_limit")["wall"] = 1_500  # after a1's claim, before b1's
    assert violated(run()) == {"key_limit_respected"}


def test_a_limit_removed_holds_no_later_claim():
    events, run = mutated()
    find(events, "final_attempt", id="a1")["finished_at"] = 2_500
    events.append(ev("queue_key_limit", 1_500, limit=None))
    assert run().ok


def test_a_job_that_lost_its_concurrency_key_is_caught():
    events, run = mutated()
    find(events, "final_job", id="j3")["concurrency_key"] = ""
    assert violated(run()) == {"concurrency_key_kept"}


def test_a_history_without_keys_or_limits_checks_none():
    events, run = mutated()
    events[:] = [e for e in events if e["kind"] not in ("queue_key_limit", "queue_limit")]
    for event in events:
        event.pop("concurrency_keys", None)
    report = run()
    assert report.ok
    for name in ("concurrency_key_kept", "key_limit_respected", "queue_limit_respected"):
        assert report.results[name].checked == 0, name


def test_an_acknowledged_job_that_did_not_end_is_caught():
    events, run = mutated()
    find(events, "final_job", id="j1")["state"] = "running"
    assert violated(run()) >= {"acknowledged_jobs_terminal"}


def test_an_acknowledged_job_missing_on_the_coordinator_is_caught():
    events, run = mutated()
    events[:] = [e for e in events if not (e["kind"] == "final_job" and e["job"]["id"] == "j1")]
    report = run()
    assert "acknowledged_jobs_terminal" in violated(report)
    assert any("not on the coordinator" in v.message for v in report.violations)


def test_a_key_acknowledged_as_two_jobs_is_caught():
    events, run = mutated()
    events.append(ev("enqueue", 1_500, producer=1, keys=["k1"], ids=["j9"], tries=2))
    assert violated(run()) == {"idempotent_enqueue", "acknowledged_jobs_terminal"}


def test_a_job_carrying_another_key_is_caught():
    events, run = mutated()
    find(events, "final_job", id="j2")["idempotency_key"] = "k1"
    assert violated(run()) == {"idempotent_enqueue"}


def test_two_succeeded_attempts_in_one_generation_are_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b1")["outcome"] = "succeeded"
    find(events, "final_attempt", id="b1")["retry_delay_ms"] = None
    assert "single_success_per_generation" in violated(run())


def test_two_successes_acknowledged_to_workers_in_one_generation_are_caught():
    """The coordinator's records show one success, but two workers were told theirs was
    accepted (the accepted one from a lapsed attempt is also a stale result)."""
    events, run = mutated()
    events.append(ev("ack", 3_100, worker_id="w2", attempt="b1", status="accepted", outcome="succeeded"))
    assert violated(run()) == {"single_success_per_generation", "no_stale_result_accepted"}


def test_successes_in_different_generations_are_fine():
    events, run = mutated()
    b1 = find(events, "final_attempt", id="b1")
    b1.update(outcome="succeeded", retry_delay_ms=None, finished_at=2_500)
    b2 = find(events, "final_attempt", id="b2")
    b2.update(generation=2, execution=1)
    find(events, "start", attempt="b2").update(generation=2, execution=1)
    find(events, "final_job", id="j2").update(generation=2, executions=1)
    events.append(
        ev("finish", 2_400, worker_id="w2", job="j2", attempt="b1", result="returned", output="b1|k2")
    )
    report = run()
    assert "single_success_per_generation" not in violated(report), report.summary()


def test_a_result_accepted_from_a_superseded_attempt_is_caught():
    events, run = mutated()
    events.append(
        ev("ack", 5_200, worker_id="w2", attempt="b1", status="accepted", outcome="retryable_failure")
    )
    report = run()
    assert violated(report) == {"no_stale_result_accepted"}
    assert "recorded the attempt abandoned" in report.violations[0].message


def test_a_success_answered_stale_yet_recorded_is_caught():
    events, run = mutated()
    find(events, "ack", attempt="a1")["status"] = "stale"
    assert violated(run()) == {"no_stale_result_accepted"}


def test_a_stale_answer_to_a_superseded_attempt_is_fine():
    events, run = mutated()
    events.append(ev("ack", 5_200, worker_id="w2", attempt="b1", status="stale", outcome="succeeded"))
    assert run().ok


def test_executions_not_matching_the_started_attempts_are_caught():
    events, run = mutated()
    find(events, "final_job", id="j1")["executions"] = 2
    assert violated(run()) == {"executions_match_attempts"}


def test_started_attempts_numbered_out_of_order_are_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b2")["execution"] = 3
    find(events, "start", attempt="b2")["execution"] = 3
    report = run()
    assert "executions_match_attempts" in violated(report)
    assert any("numbered [1, 3]" in v.message for v in report.violations)


def test_executions_above_the_budget_are_caught():
    events, run = mutated()
    find(events, "final_job", id="j2")["max_executions"] = 1
    assert "executions_match_attempts" in violated(run())


def test_overlapping_attempts_are_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b2")["claimed_at"] = 4_000
    assert "attempts_exclusive" in violated(run())


def test_a_handler_call_the_coordinator_never_granted_is_caught():
    events, run = mutated()
    events.append(ev("start", 1_300, worker_id="w2", job="j1", attempt="zz", execution=1, generation=1))
    assert violated(run()) == {"handler_calls_granted"}


def test_a_handler_called_with_another_execution_number_is_caught():
    events, run = mutated()
    find(events, "start", attempt="b2")["execution"] = 1
    assert violated(run()) == {"handler_calls_granted"}


def test_an_attempt_whose_handler_ran_twice_is_caught():
    events, run = mutated()
    events.append(ev("start", 1_150, worker_id="w1", job="j1", attempt="a1", execution=1, generation=1))
    assert violated(run()) == {"handler_calls_granted"}


def test_a_handler_on_another_worker_than_the_claim_is_caught():
    events, run = mutated()
    find(events, "start", attempt="a1")["worker_id"] = "w2"
    assert violated(run()) == {"handler_calls_granted"}


def test_a_lease_recovered_late_is_caught():
    """Expiry 5000: allowed until 5000 + 200 + 1000; recovered at 6500."""
    events, run = mutated()
    find(events, "final_attempt", id="b1")["finished_at"] = 6_500
    for name in ("b2",):
        record = find(events, "final_attempt", id=name)
        record.update(claimed_at=6_700, started_at=6_710, finished_at=6_800)
    find(events, "final_job", id="j2")["finished_at"] = 6_800
    report = run()
    assert "lease_recovered_in_time" in violated(report)
    assert "recovered 1500 ms later" in str(report.violations)


def test_a_lease_recovered_before_it_expired_is_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b1")["finished_at"] = 4_000
    report = run()
    assert "lease_recovered_in_time" in violated(report)
    assert "before its lease expired" in str(report.violations)


def test_a_lease_not_seen_recently_enough_is_undecidable_not_a_violation():
    events = copy.deepcopy(clean_events())
    events[:] = [e for e in events if not (e["kind"] == "poll" and e["wall"] == 4_900)]
    find(events, "final_attempt", id="b1")["finished_at"] = 6_500
    for record in (find(events, "final_attempt", id="b2"),):
        record.update(claimed_at=6_700, started_at=6_710, finished_at=6_800)
    report = check(history(events), ["lease_recovered_in_time"])
    result = report.results["lease_recovered_in_time"]
    assert (result.checked, result.unverified, result.violations) == (0, 1, [])


def test_a_coordinator_down_at_the_expiry_moves_the_deadline():
    events, run = mutated()
    events.append(ev("coordinator_down", 4_800, replica="a"))
    events.append(ev("coordinator_up", 6_000, replica="a", target="127.0.0.1:2"))
    find(events, "final_attempt", id="b1")["finished_at"] = 6_500
    find(events, "final_attempt", id="b2").update(claimed_at=6_700, started_at=6_710, finished_at=6_800)
    assert run().ok, run().summary()


def test_a_silent_workers_lease_renewed_by_someone_else_is_caught():
    """w2 is dead from 3000, yet its lease was renewed to 7000: the coordinator's own
    expiry is kept, but nothing may renew the leases of a killed worker."""
    events, run = mutated()
    events.append(ev("poll", 6_000, replica="a", held=[["j2", "b1", "running", 7_000]]))
    find(events, "final_attempt", id="b1")["finished_at"] = 7_100
    find(events, "final_attempt", id="b2").update(claimed_at=7_300, started_at=7_310, finished_at=7_400)
    report = run()
    assert violated(report) == {"silenced_worker_recovered"}


def test_a_stopped_worker_that_resumed_before_the_deadline_is_undecidable():
    events, run = mutated()
    fault = find(events, "fault", id=1)
    fault["fault"] = "sigstop_worker"
    find(events, "heal", id=1)["wall"] = 4_000  # SIGCONT before 3000 + 2000 + 200 + 1000
    events.append(ev("poll", 6_000, replica="a", held=[["j2", "b1", "running", 7_000]]))
    find(events, "final_attempt", id="b1")["finished_at"] = 7_100
    find(events, "final_attempt", id="b2").update(claimed_at=7_300, started_at=7_310, finished_at=7_400)
    report = run()
    assert report.ok, report.summary()
    assert report.results["silenced_worker_recovered"].unverified == 1


def test_bytes_held_by_a_half_open_proxy_count_as_later_contact():
    """A partition of w2's proxy from 2800 that resumed at 5000 may deliver a heartbeat
    sent before the kill at 5000: the deadline counts from there."""
    events, run = mutated()
    events.append(ev("fault", 2_800, id=2, fault="proxy_partition", proxy="p1", heal="resume"))
    events.append(ev("heal", 5_000, id=2))
    events.append(ev("poll", 5_100, replica="a", held=[["j2", "b1", "running", 7_000]]))
    find(events, "final_attempt", id="b1")["finished_at"] = 7_100
    find(events, "final_attempt", id="b2").update(claimed_at=7_300, started_at=7_310, finished_at=7_400)
    assert run().ok, run().summary()
    events[-3]["heal"] = "drop"  # dropped instead: nothing arrives late
    assert violated(run()) == {"silenced_worker_recovered"}


def test_a_retry_delay_above_its_nominal_is_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b1")["retry_delay_ms"] = 120  # nominal 100 after execution 1
    report = run()
    assert violated(report) == {"retry_delay_within_bounds"}
    assert "outside [50, 100] ms" in report.violations[0].message


def test_a_retry_delay_below_half_its_nominal_is_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b1")["retry_delay_ms"] = 49
    assert violated(run()) == {"retry_delay_within_bounds"}


def test_a_retry_delay_is_bounded_by_its_cap():
    assert nominal_delay_ms(1, 100, 800) == 100
    assert nominal_delay_ms(3, 100, 800) == 400
    assert nominal_delay_ms(5, 100, 800) == 800
    events = copy.deepcopy(clean_events())
    find(events, "final_attempt", id="b1").update(execution=5, retry_delay_ms=400)
    find(events, "final_attempt", id="b2").update(execution=6, claimed_at=5_600)
    report = check(history(events), ["retry_delay_within_bounds"])
    assert report.ok, report.summary()


def test_a_retry_claimed_before_its_delay_is_caught():
    events, run = mutated()
    find(events, "final_attempt", id="b2").update(claimed_at=5_120)  # due at 5100 + 80
    report = run()
    assert violated(report) == {"retry_delay_within_bounds"}
    assert "before the 80 ms delay was over" in report.violations[0].message


def test_a_retry_delay_on_a_success_is_caught():
    events, run = mutated()
    find(events, "final_attempt", id="a1")["retry_delay_ms"] = 50
    assert violated(run()) == {"retry_delay_within_bounds"}


def test_unstarted_requeue_delays_follow_the_streak_without_jitter():
    """R-4: streak 1 waits 100 ms, streak 2 (a release in between keeps it) 200 ms."""
    events = copy.deepcopy(clean_events())
    events[:] = [e for e in events if not (e["kind"] == "final_attempt" and e["attempt"]["job"] == "j1")]
    for record in (
        attempt("u1", "j1", 1_000, finished_at=3_000, outcome="unstarted_abandoned", retry_delay_ms=100),
        attempt("u2", "j1", 3_200, finished_at=3_300, outcome="released"),
        attempt("u3", "j1", 3_400, finished_at=5_400, outcome="unstarted_abandoned", retry_delay_ms=200),
        attempt("a1", "j1", 5_700, started_at=5_710, finished_at=5_800, outcome="succeeded", execution=1),
    ):
        events.append(ev("final_attempt", 9_000, attempt=record))
    assert check(history(events), ["retry_delay_within_bounds"]).ok
    find(events, "final_attempt", id="u3")["retry_delay_ms"] = 150
    report = check(history(events), ["retry_delay_within_bounds"])
    assert "expected 200 ms for streak 2" in report.violations[0].message


def test_a_succeeded_job_with_another_attempts_output_is_caught():
    events, run = mutated()
    find(events, "final_job", id="j2")["output"] = "b1|k2"
    report = run()
    assert violated(report) == {"terminal_state_consistent"}
    assert "from attempt b1" in report.violations[0].message


def test_a_success_without_a_handler_that_returned_is_caught():
    events, run = mutated()
    events[:] = [e for e in events if not (e["kind"] == "finish" and e["attempt"] == "a1")]
    assert violated(run()) == {"terminal_state_consistent"}


def test_a_succeeded_job_whose_last_attempt_failed_is_caught():
    events, run = mutated()
    find(events, "final_job", id="j1")["state"] = "succeeded"
    find(events, "final_attempt", id="a1")["outcome"] = "retryable_failure"
    find(events, "ack", attempt="a1")["outcome"] = "retryable_failure"
    assert violated(run()) == {"terminal_state_consistent"}


def test_a_failed_job_with_a_success_is_caught():
    events, run = mutated()
    find(events, "final_job", id="j1")["state"] = "failed"
    assert violated(run()) == {"terminal_state_consistent"}


def test_an_ended_job_with_an_open_attempt_is_caught():
    events, run = mutated()
    events.append(ev("final_attempt", 9_000, attempt=attempt("a2", "j1", 1_300)))
    assert "terminal_state_consistent" in violated(run())


def test_a_generation_claimed_after_its_cancel_is_caught():
    events, run = mutated()
    events.append(ev("cancel", 5_000, job="j2", ok=True, state="cancelled", generation=1))
    find(events, "final_job", id="j2")["state"] = "cancelled"
    events[:] = [e for e in events if not (e["kind"] == "finish" and e["attempt"] == "b2")]
    find(events, "final_attempt", id="b2")["outcome"] = "cancelled"
    find(events, "ack", attempt="b2")["outcome"] = "cancelled"
    assert violated(run()) == {"cancel_respected"}


def test_a_cancel_of_a_running_job_ends_cancelled_unless_that_run_succeeded():
    events, run = mutated()
    events.append(ev("cancel", 5_350, job="j2", ok=True, state="running", generation=1))
    assert run().ok  # the run noticed too late and succeeded: it keeps its success
    find(events, "cancel", job="j2")["state"] = "cancelled"
    assert violated(run()) == {"cancel_respected"}


def test_a_cancelled_job_that_ends_failed_is_caught():
    events, run = mutated()
    events.append(ev("cancel", 5_350, job="j2", ok=True, state="running", generation=1))
    find(events, "final_job", id="j2")["state"] = "failed"
    find(events, "final_attempt", id="b2")["outcome"] = "retryable_failure"
    find(events, "ack", attempt="b2")["outcome"] = "retryable_failure"
    assert violated(run()) == {"cancel_respected"}


def test_the_recovery_deadline_counts_from_a_replica_serving_long_enough():
    """Allowed: 200 + 1000 ms after the lapse, in a period of serving at least that long:
    a serves 0-5000, 6000-6100 (killed before a pass) and from 8000; b 0-200 and from 7000."""
    events = [
        ev("coordinator_up", 0, replica="a"),
        ev("coordinator_down", 5_000, replica="a"),
        ev("coordinator_up", 6_000, replica="a"),
        ev("coordinator_down", 6_100, replica="a"),
        ev("coordinator_up", 8_000, replica="a"),
    ]
    only_a = Model(history(events))
    assert only_a.recovery_deadline(100) == 1_300
    assert only_a.recovery_deadline(4_500) == 9_200  # 500 ms left, then 100 ms: too short
    assert only_a.recovery_deadline(9_000) == 10_200
    events += [ev("coordinator_up", 0, replica="b"), ev("coordinator_down", 200, replica="b")]
    events.append(ev("coordinator_up", 7_000, replica="b"))
    assert Model(history(events)).recovery_deadline(4_500) == 8_200  # b is back first
    events += [ev("fault", 7_500, id=9, fault="pg_restart"), ev("heal", 7_900, id=9)]
    assert Model(history(events)).recovery_deadline(4_500) == 9_100  # the database was down
    assert Model(history([])).recovery_deadline(50) == 1_250


def test_a_lease_lapsing_in_a_crash_loop_counts_from_the_restart_that_lasted():
    events = copy.deepcopy(clean_events())
    events.append(ev("coordinator_down", 4_800, replica="a"))
    events.append(ev("coordinator_up", 6_000, replica="a", target="127.0.0.1:2"))
    events.append(ev("coordinator_down", 6_150, replica="a"))  # killed before its first pass
    events.append(ev("coordinator_up", 8_000, replica="a", target="127.0.0.1:3"))
    events.append(ev("poll", 8_100, replica="a", held=[["j2", "b1", "running", 5_000]]))
    find(events, "final_attempt", id="b1")["finished_at"] = 8_300
    find(events, "final_attempt", id="b2").update(claimed_at=8_500, started_at=8_510, finished_at=8_600)
    assert check(history(events), ["lease_recovered_in_time", "silenced_worker_recovered"]).ok
    find(events, "final_attempt", id="b1")["finished_at"] = 9_300
    find(events, "final_attempt", id="b2").update(claimed_at=9_500, started_at=9_510, finished_at=9_600)
    report = check(history(events), ["lease_recovered_in_time", "silenced_worker_recovered"])
    assert violated(report) == {"lease_recovered_in_time", "silenced_worker_recovered"}


# -- history files and the re-check command --------------------------------------------------


def test_a_cut_last_line_is_dropped_and_reported():
    text = encode_event({"kind": "start", "wall": 1}).decode() + '{"kind": "fin'
    parsed = parse_jsonl(text)
    assert parsed.events == [{"kind": "start", "wall": 1}]
    assert parsed.truncated_last_line


def test_a_bad_line_before_the_last_is_an_error():
    with pytest.raises(ValueError, match=":1: not a JSON line"):
        parse_jsonl('{"kind": "st\n{"kind": "finish"}\n')


def test_merge_orders_by_wall_time_and_counts_cut_files(tmp_path: Path):
    (tmp_path / "events-w1.jsonl").write_text(json.dumps({"kind": "start", "wall": 2}) + "\n" + '{"kin')
    (tmp_path / "events-w2.jsonl").write_text(json.dumps({"kind": "finish", "wall": 3}) + "\n")
    merged = merge({"seed": 1}, [{"kind": "enqueue", "wall": 1}], sorted(tmp_path.glob("events-*.jsonl")))
    assert [e["kind"] for e in merged.events] == ["enqueue", "start", "finish"]
    assert merged.header["truncated_process_files"] == 1


def test_a_saved_history_checks_again_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    good = history(clean_events()).save(tmp_path / "good.jsonl")
    with good.open("a") as out:
        out.write('{"kind": "ack", "attem')  # a run killed mid-line
    assert load_history(good).header["seed"] == 7
    assert check_command.main([str(good)]) == 0
    assert "violations: 0" in capsys.readouterr().out

    events = clean_events()
    find(events, "final_job", id="j1")["executions"] = 5
    bad = history(events).save(tmp_path / "bad.jsonl")
    assert check_command.main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "executions_match_attempts: 3 checked: 1 VIOLATED" in out
    assert check_command.main([str(bad), "--only", "idempotent_enqueue"]) == 0

    (tmp_path / "no-header.jsonl").write_text(json.dumps({"kind": "start"}) + "\n")
    assert check_command.main([str(tmp_path / "no-header.jsonl")]) == 2
