"""docs/limits.md bounds (``StoreBounds``) as the store applies them, on both engines: each
reject leaves the store exactly as it was (every row of every job table compared before
and after), each clamp serves up to the cap, each truncation keeps valid UTF-8 inside
the cap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coordinator.domain.bounds import StoreBounds
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import CoordinatorError, InvalidArgument, JobOutputTooLarge, NotFound
from coordinator.service.work import ResultReport, WorkBatch
from worker_sdk.grammar import TRUNCATION_MARKER

from .harness import WIRE, Harness

EMOJI = "😀"  # outside the BMP: 2 UTF-16 code units, 4 UTF-8 bytes; not a letter
ASTRAL = "𠀀"  # a CJK letter outside the BMP: valid in names, 2 UTF-16 code units
CHARS_BY_WIDTH = {1: "a", 2: "é", 3: "€", 4: EMOJI}


def assert_rejected_untouched(harness: Harness, write: Callable[[], Any], error: type[Exception]) -> Any:
    """Runs ``write``, which must raise ``error``, and checks the store did not change."""
    before = harness.rows()
    with pytest.raises(error) as caught:
        write()
    assert harness.rows() == before, "a rejected write changed the store"
    return caught.value


def test_s5_a_store_without_explicit_bounds_uses_the_defaults(harness: Harness) -> None:
    assert harness.store.bounds == StoreBounds()
    assert harness.with_bounds(max_page_size=7).store.bounds == StoreBounds(max_page_size=7)


# -- max_payload_bytes: reject --------------------------------------------------------------


def test_s5_payload_of_exactly_max_payload_bytes_is_accepted(harness: Harness) -> None:
    payload = b"p" * harness.store.bounds.max_payload_bytes
    assert harness.job(harness.enqueue(payload=payload)).payload == payload


def test_s5_payload_over_max_payload_bytes_is_rejected_naming_wire_name_and_size(harness: Harness) -> None:
    harness.enqueue()  # something in the store to keep
    size = 65_537

    error = assert_rejected_untouched(harness, lambda: harness.enqueue(payload=b"p" * size), InvalidArgument)

    assert error.reason == "PAYLOAD_TOO_LARGE"
    assert error.field == "jobs[0].payload"
    assert WIRE in str(error) and str(size) in str(error) and "65536" in str(error)
    assert "reference" in str(error)
    assert error.metadata == {
        "wire_name": WIRE,
        "size_bytes": str(size),
        "limit_bytes": "65536",
        "index": "0",
    }


def test_s5_a_batch_with_one_oversized_payload_creates_nothing_and_names_its_index(harness: Harness) -> None:
    specs = [NewJobSpec(WIRE, b"ok") for _ in range(4)]
    specs[2] = NewJobSpec("reports.build", b"x" * 65_537)

    error = assert_rejected_untouched(harness, lambda: harness.enqueue_specs(specs), InvalidArgument)

    assert error.field == "jobs[2].payload" and error.index == 2
    assert "reports.build" in str(error)
    assert harness.count_jobs() == 0


def test_s5_max_payload_bytes_is_configurable(harness: Harness) -> None:
    small = harness.with_bounds(max_payload_bytes=10)
    small.enqueue(payload=b"x" * 10)

    error = assert_rejected_untouched(small, lambda: small.enqueue(payload=b"x" * 11), InvalidArgument)

    assert error.metadata["limit_bytes"] == "10"


def test_s5_enqueue_batches_over_max_enqueue_batch_are_rejected(harness: Harness) -> None:
    small = harness.with_bounds(max_enqueue_batch=3)
    small.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(3)])

    error = assert_rejected_untouched(
        small, lambda: small.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(4)]), InvalidArgument
    )

    assert (error.field, error.reason) == ("jobs", "BATCH_TOO_LARGE")


def test_s5_an_empty_enqueue_is_rejected(harness: Harness) -> None:
    error = assert_rejected_untouched(harness, lambda: harness.enqueue_specs([]), InvalidArgument)
    assert error.reason == "FIELD_REQUIRED"


# -- max_wire_name_length (UTF-16 code units) and the name grammar: reject ----------------------


@pytest.mark.parametrize(
    "name",
    [
        "x" * 128,
        ASTRAL * 64,  # 128 UTF-16 code units
        "y" * 126 + ASTRAL,
        "заказ.создан",
        "注文-確定_v2",
        "٣.digits",
        "a",
    ],
)
def test_s5_wire_names_within_the_bound_and_grammar_are_accepted(harness: Harness, name: str) -> None:
    assert harness.job(harness.enqueue(wire_name=name)).wire_name == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("x" * 129, "NAME_TOO_LONG"),
        (ASTRAL * 65, "NAME_TOO_LONG"),  # 65 characters, 130 code units
        ("y" * 127 + ASTRAL, "NAME_TOO_LONG"),  # 128 characters, 129 code units
        ("", "NAME_EMPTY"),
        ("two words", "NAME_INVALID"),
        ("a/b", "NAME_INVALID"),
        ("nul\x00", "NAME_INVALID"),
        ("emoji" + EMOJI, "NAME_INVALID"),  # within the length, but not a letter or digit
        ("tab\t", "NAME_INVALID"),
    ],
)
def test_s5_wire_names_over_the_bound_or_outside_the_grammar_are_rejected(
    harness: Harness, name: str, reason: str
) -> None:
    harness.enqueue()
    error = assert_rejected_untouched(harness, lambda: harness.enqueue(wire_name=name), InvalidArgument)
    assert (error.field, error.reason) == ("jobs[0].wire_name", reason)


def test_s5_max_wire_name_length_counts_utf16_code_units_and_is_configurable(harness: Harness) -> None:
    small = harness.with_bounds(max_wire_name_length=4)
    small.enqueue(wire_name="abcd")
    small.enqueue(wire_name="ab" + ASTRAL)  # three characters, four code units

    error = assert_rejected_untouched(small, lambda: small.enqueue(wire_name="abcde"), InvalidArgument)
    assert error.metadata == {"length_utf16": "5", "limit": "4", "index": "0"}
    error = assert_rejected_untouched(small, lambda: small.enqueue(wire_name="abc" + ASTRAL), InvalidArgument)
    assert error.metadata["length_utf16"] == "5"  # four characters, five code units


def test_s5_queue_names_follow_the_name_grammar_with_128_code_units(harness: Harness) -> None:
    harness.enqueue(queue="q" * 127 + "z")
    error = assert_rejected_untouched(harness, lambda: harness.enqueue(queue="q" * 129), InvalidArgument)
    assert (error.field, error.reason) == ("jobs[0].queue", "NAME_TOO_LONG")
    error = assert_rejected_untouched(harness, lambda: harness.enqueue(queue="a b"), InvalidArgument)
    assert (error.field, error.reason) == ("jobs[0].queue", "NAME_INVALID")


# -- max_parents_per_job (after de-duplication): reject -----------------------------------------


def _ids(count: int) -> tuple[str, ...]:
    return tuple(f"0193a7c2-5b1e-7c3d-9f00-{n:012x}" for n in range(count))


def test_s5_more_than_max_parents_per_job_distinct_parents_are_rejected(harness: Harness) -> None:
    spec = NewJobSpec(WIRE, b"", parent_ids=_ids(65))

    error = assert_rejected_untouched(harness, lambda: harness.enqueue_specs([spec]), InvalidArgument)

    assert (error.field, error.reason) == ("jobs[0].parent_ids", "TOO_MANY_PARENTS")
    assert error.metadata["count"] == "65" and error.metadata["limit"] == "64"


def test_s5_parents_are_counted_after_deduplication(harness: Harness) -> None:
    """64 distinct parents named twice pass the bound; none of them exists, so the job is
    then refused for that (R-15) — but not for its count."""
    spec = NewJobSpec(WIRE, b"", parent_ids=_ids(64) * 2)

    error = assert_rejected_untouched(harness, lambda: harness.enqueue_specs([spec]), NotFound)

    assert (error.reason, error.metadata["job_id"]) == ("PARENT_NOT_FOUND", _ids(1)[0])


def test_s5_max_parents_per_job_is_configurable(harness: Harness) -> None:
    small = harness.with_bounds(max_parents_per_job=2)
    spec = NewJobSpec(WIRE, b"", parent_ids=_ids(3))
    error = assert_rejected_untouched(small, lambda: small.enqueue_specs([spec]), InvalidArgument)
    assert error.reason == "TOO_MANY_PARENTS"


def test_malformed_parent_ids_are_rejected_naming_the_parent(harness: Harness) -> None:
    spec = NewJobSpec(WIRE, b"", parent_ids=(_ids(1)[0], "not-a-job"))
    error = assert_rejected_untouched(harness, lambda: harness.enqueue_specs([spec]), InvalidArgument)
    assert (error.field, error.reason) == ("jobs[0].parent_ids[1]", "INVALID_ID")


# -- max_output_bytes: reject the success write -------------------------------------------------


def test_s5_output_of_exactly_max_output_bytes_is_stored(harness: Harness) -> None:
    claimed = harness.run(harness.enqueue())
    output = b"o" * harness.store.bounds.max_output_bytes

    answer = harness.report(claimed.attempt_id, output=output)

    assert answer.accepted and answer.job_state is JobState.SUCCEEDED
    assert harness.job(claimed.job.id).output == output


def test_s5_output_over_max_output_bytes_rejects_the_write_and_leaves_the_store_untouched(
    harness: Harness,
) -> None:
    claimed = harness.run(harness.enqueue())
    before = harness.rows()

    answer = harness.report(claimed.attempt_id, output=b"o" * 65_537)

    assert harness.rows() == before
    assert not answer.accepted
    error = answer.error
    assert isinstance(error, JobOutputTooLarge)
    assert (error.job_id, error.size_bytes, error.limit_bytes) == (claimed.job.id, 65_537, 65_536)
    assert error.reason == "OUTPUT_TOO_LARGE"
    assert harness.job(claimed.job.id).state is JobState.RUNNING


def test_s5_after_an_output_rejection_the_worker_records_output_too_large(harness: Harness) -> None:
    """What the SDK does with the rejection: the same attempt reports a permanent failure."""
    small = harness.with_bounds(max_output_bytes=8)
    claimed = small.run(small.enqueue())
    assert small.report(claimed.attempt_id, output=b"123456789").error is not None

    answer = small.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE, error_code="output_too_large")

    assert answer.accepted and answer.job_state is JobState.FAILED
    job = small.job(claimed.job.id)
    assert (job.last_error_code, job.output) == ("output_too_large", None)


def test_s5_output_is_only_checked_on_success(harness: Harness) -> None:
    """A failure writes no output, so its size does not matter (R-16)."""
    small = harness.with_bounds(max_output_bytes=8)
    claimed = small.run(small.enqueue())
    answer = small.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE, output=b"x" * 100)
    assert answer.accepted and small.job(claimed.job.id).output is None


# -- results that cannot be written -------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt_id", "reason", "error"),
    [
        ("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f", "ATTEMPT_NOT_FOUND", NotFound),
        ("not-an-attempt", "INVALID_ID", InvalidArgument),
        ("", "INVALID_ID", InvalidArgument),
    ],
)
def test_results_for_attempts_that_do_not_exist_are_rejected_and_change_nothing(
    harness: Harness, attempt_id: str, reason: str, error: type[CoordinatorError]
) -> None:
    harness.run(harness.enqueue())
    before = harness.rows()

    answer = harness.report(attempt_id)

    assert harness.rows() == before
    assert not answer.accepted and isinstance(answer.error, error)
    assert answer.error.reason == reason


# -- failure detail and message: truncate ------------------------------------------------------


@pytest.mark.parametrize("width", sorted(CHARS_BY_WIDTH))
def test_s5_failure_detail_and_message_are_truncated_utf8_safe_at_every_cut_position(
    harness: Harness, width: int
) -> None:
    """The stored text, read back from the database: within the cap, never a split code
    point, the detail's marker inside its cap, nothing dropped that would have fitted —
    with the multi-byte characters shifted so the cap falls on every byte of one."""
    cap = 64
    small = harness.with_bounds(max_failure_detail_bytes=cap, max_failure_message_bytes=cap)
    char = CHARS_BY_WIDTH[width]
    texts = ["x" * lead + char * 40 for lead in range(4)]
    texts += ["y" * (cap - width) + char, "y" * (cap - width + 1) + char]  # fits exactly; one byte over
    job_ids = [small.enqueue(queue=f"q{n}") for n in range(len(texts))]
    claimed = [small.run(job_id) for job_id in job_ids]

    results = [
        ResultReport(c.attempt_id, _report(text), sender=small.holder(c.attempt_id))
        for c, text in zip(claimed, texts, strict=True)
    ]
    answers = small.ops.process(WorkBatch(results=results)).results

    assert all(answer.accepted for answer in answers)
    for job_id, text in zip(job_ids, texts, strict=True):
        [attempt] = small.attempts(job_id)
        assert attempt.detail is not None and attempt.message is not None
        _assert_cut(text, attempt.detail, cap, TRUNCATION_MARKER)
        _assert_cut(text, attempt.message, cap, "")


def _report(text: str) -> Any:
    from coordinator.domain.lifecycle import Report

    return Report(Outcome.PERMANENT_FAILURE, error_code="boom", message=text, detail=text)


def _assert_cut(original: str, stored: str, cap: int, marker: str) -> None:
    encoded = stored.encode("utf-8")
    if len(original.encode()) <= cap:
        assert stored == original
        return
    assert len(encoded) <= cap
    assert stored.endswith(marker)
    kept = stored[: len(stored) - len(marker)]
    assert original.startswith(kept)
    budget = cap - len(marker.encode())
    assert len(kept.encode()) + len(original[len(kept)].encode()) > budget, "dropped what would fit"


def test_s5_failure_message_default_cap_is_1024_bytes(harness: Harness) -> None:
    claimed = harness.run(harness.enqueue())
    harness.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE, message=EMOJI * 300)
    [attempt] = harness.attempts(claimed.job.id)
    assert attempt.message == EMOJI * 256


# -- transition history: drop oldest -----------------------------------------------------------


def test_s5_max_history_per_job_keeps_the_newest_transitions(harness: Harness) -> None:
    small = harness.with_bounds(max_history_per_job=5)
    job_id = small.enqueue()
    for _ in range(4):  # claim + release: 2 transitions each, 9 with the enqueue
        small.release(small.claim_one(job_id).attempt_id)

    history = small.transitions(job_id)

    assert [t["seq"] for t in history] == [5, 6, 7, 8, 9]
    assert small.job(job_id).history_seq == 9


# -- clamps ------------------------------------------------------------------------------------


def test_s5_claims_are_clamped_to_max_claim_batch_silently(harness: Harness) -> None:
    small = harness.with_bounds(max_claim_batch=2)
    small.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(5)])
    assert [len(small.claim(n)) for n in (100, 1, 0, -5, 100)] == [2, 1, 0, 0, 2]


def test_s5_pages_are_clamped_to_max_page_size_silently(harness: Harness) -> None:
    small = harness.with_bounds(max_page_size=3)
    small.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(5)])
    page, token = small.jobs.list_jobs(
        queue=None, state=None, wire_name=None, page_size=2**31 - 1, page_token=""
    )
    assert len(page) == 3 and token


# -- other bad input: a clear error, the store as it was ------------------------------------------


@pytest.mark.parametrize(
    ("call", "field", "reason"),
    [
        (lambda h: h.jobs.get_job("nope"), "id", "INVALID_ID"),
        (lambda h: h.jobs.get_job("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6"), "id", "INVALID_ID"),
        (lambda h: h.jobs.list_attempts("{0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f}"), "job_id", "INVALID_ID"),
        (lambda h: _list(h, page_size=-1), "page_size", "OUT_OF_RANGE"),
        (lambda h: _list(h, page_token="zzz"), "page_token", "PAGE_TOKEN_INVALID"),
        (lambda h: _list(h, queue="bad queue"), "queue", "NAME_INVALID"),
        (lambda h: _list(h, wire_name="x" * 200), "wire_name", "NAME_TOO_LONG"),
    ],
)
def test_malformed_reads_get_a_clear_invalid_argument(
    harness: Harness, call: Callable[[Harness], Any], field: str, reason: str
) -> None:
    harness.enqueue()
    error = assert_rejected_untouched(harness, lambda: call(harness), InvalidArgument)
    assert (error.field, error.reason) == (field, reason)


def test_unknown_job_ids_get_not_found(harness: Harness) -> None:
    unknown = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
    error = assert_rejected_untouched(harness, lambda: harness.jobs.get_job(unknown), NotFound)
    assert error.reason == "JOB_NOT_FOUND" and error.metadata == {"job_id": unknown}
    assert_rejected_untouched(harness, lambda: harness.jobs.list_attempts(unknown.upper()), NotFound)


@pytest.mark.parametrize(
    ("layer", "field"),
    [
        ({"max_executions": 0}, "jobs[0].settings.max_executions"),
        ({"max_executions": 101}, "jobs[0].settings.max_executions"),
        ({"retry_initial_delay_ms": 0}, "jobs[0].settings.retry_initial_delay"),
        ({"retry_max_delay_ms": 86_400_001}, "jobs[0].settings.retry_max_delay"),
        (
            {"retry_initial_delay_ms": 2_000, "retry_max_delay_ms": 1_000},
            "jobs[0].settings.retry_initial_delay",
        ),
        ({"execution_timeout_ms": 30 * 86_400_000 + 1}, "jobs[0].settings.execution_timeout"),
        ({"max_unstarted_abandonments": 0}, "jobs[0].settings.max_unstarted_abandonments"),
    ],
)
def test_settings_out_of_range_are_rejected(harness: Harness, layer: dict[str, int], field: str) -> None:
    from coordinator.domain.settings import SettingsLayer

    spec = NewJobSpec(WIRE, b"", settings=SettingsLayer(**layer))  # type: ignore[arg-type]
    error = assert_rejected_untouched(harness, lambda: harness.enqueue_specs([spec]), InvalidArgument)
    assert (error.field, error.reason) == (field, "SETTING_OUT_OF_RANGE")


def _list(harness: Harness, **changes: Any) -> Any:
    query: dict[str, Any] = {
        "queue": None,
        "state": None,
        "wire_name": None,
        "page_size": 0,
        "page_token": "",
    }
    query.update(changes)
    return harness.jobs.list_jobs(**query)
