"""The trace context rule the SDK and the coordinator share (``worker_sdk.trace_rules``)."""

from __future__ import annotations

import pytest

from worker_sdk.trace_rules import (
    MAX_TRACESTATE_BYTES,
    TRACEPARENT_LENGTH,
    fit_tracestate,
    trace_context_problem,
    trace_id_of,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("traceparent", "tracestate"),
    [
        (TRACEPARENT, ""),
        (TRACEPARENT, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        ("cc" + TRACEPARENT[2:], ""),  # a later version in version 00's form
        (TRACEPARENT[:-2] + "00", "k=" + "v" * (MAX_TRACESTATE_BYTES - 2)),
    ],
)
def test_well_formed_contexts_pass(traceparent: str, tracestate: str) -> None:
    assert len(traceparent) == TRACEPARENT_LENGTH
    assert trace_context_problem(traceparent, tracestate) is None


@pytest.mark.parametrize(
    ("traceparent", "tracestate", "problem"),
    [
        ("", "", "exactly 55 characters (W3C '00-<trace-id>-<parent-id>-<flags>'), got 0"),
        (TRACEPARENT + "-00", "", "exactly 55 characters"),
        (TRACEPARENT.replace("-", "_"), "", "lowercase hex"),
        (TRACEPARENT.replace("a", "g"), "", "lowercase hex"),
        ("ff" + TRACEPARENT[2:], "", "version ff is invalid"),
        ("00-" + "0" * 32 + TRACEPARENT[35:], "", "must not be all zeros"),
        (TRACEPARENT, "k=" + "v" * MAX_TRACESTATE_BYTES, "at most 512 bytes, got 514"),
        (TRACEPARENT, "k=\x7f", "printable ASCII"),
    ],
)
def test_malformed_contexts_say_what_is_wrong(traceparent: str, tracestate: str, problem: str) -> None:
    found = trace_context_problem(traceparent, tracestate)
    assert found is not None and problem in found


def test_the_trace_id_is_read_from_a_well_formed_traceparent_only() -> None:
    assert trace_id_of(TRACEPARENT) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of(None) is None
    assert trace_id_of(TRACEPARENT[:-1]) is None


def test_a_long_tracestate_is_cut_by_whole_members_long_ones_first_then_from_the_end() -> None:
    short = "a=1,b=2"
    assert fit_tracestate(short) == short
    long_member = "big=" + "x" * 200
    members = [f"k{n:02d}=" + "v" * 40 for n in range(20)]  # 20 x 44 chars: 899 with commas
    fitted = fit_tracestate(",".join([members[0], long_member, *members[1:]]))
    assert fitted == ",".join(members[:11])  # 11 x 44 + 10 commas = 494 bytes
    assert len(fitted.encode()) <= MAX_TRACESTATE_BYTES
    assert trace_context_problem(TRACEPARENT, fitted) is None
