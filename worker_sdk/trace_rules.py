"""What a W3C trace context carried with a job may be, shared by the SDK and the
coordinator (the SDK injects one at enqueue; the coordinator checks what arrives by the
same rule before it stores it with the job).

The module is pure: standard library only, no I/O, no state, and no OpenTelemetry: the
coordinator stores trace contexts without tracing anything itself. The coordinator may
import it (the SDK must never import the coordinator), as it does ``worker_sdk.grammar``.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_TRACESTATE_BYTES",
    "TRACEPARENT_LENGTH",
    "TRACE_CONTEXT_WIRE_BYTES",
    "fit_tracestate",
    "trace_context_problem",
    "trace_id_of",
]

TRACEPARENT_LENGTH = 55
"""A ``traceparent`` value's length: ``vv-<32 hex>-<16 hex>-ff``, W3C Trace Context."""
MAX_TRACESTATE_BYTES = 512
"""The longest ``tracestate`` value kept: what W3C Trace Context requires a vendor to
propagate at least. Longer is refused rather than cut, since a cut entry is corrupt."""
TRACE_CONTEXT_WIRE_BYTES = TRACEPARENT_LENGTH + MAX_TRACESTATE_BYTES + 16
"""A trace context at its bounds on the wire, framing included (the message bounds)."""

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


def trace_context_problem(traceparent: str, tracestate: str) -> str | None:
    """Why this pair of header values is no trace context to keep (worded without a
    subject: ``traceparent must be ...``), or None when it is well formed.

    ``traceparent`` is required (an empty one is a problem); ``tracestate`` may be empty.
    Only the ``traceparent`` format of W3C's version 00 (55 characters) is accepted,
    whatever its version number; ``tracestate`` is checked for size and characters, not
    for its list grammar, which only the vendors named in it read.
    """
    if len(traceparent) != TRACEPARENT_LENGTH:
        return (
            f"traceparent must be exactly {TRACEPARENT_LENGTH} characters "
            f"(W3C '00-<trace-id>-<parent-id>-<flags>'), got {len(traceparent)}"
        )
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return (
            "traceparent must be '<version>-<trace-id>-<parent-id>-<flags>' in lowercase hex "
            f"(2, 32, 16 and 2 digits), got {traceparent!r}"
        )
    version, trace_id, parent_id = match.groups()
    if version == "ff":
        return f"traceparent version ff is invalid (W3C Trace Context), got {traceparent!r}"
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return f"traceparent's trace-id and parent-id must not be all zeros, got {traceparent!r}"
    if len(tracestate) > MAX_TRACESTATE_BYTES:
        return f"tracestate must be at most {MAX_TRACESTATE_BYTES} bytes, got {len(tracestate.encode())}"
    if _PRINTABLE_ASCII.fullmatch(tracestate) is None:
        return "tracestate must be printable ASCII (W3C Trace Context list members)"
    return None


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace ID (32 lowercase hex digits) of a well-formed ``traceparent``, the ID a
    tracing backend finds the trace by; None for None or a malformed one."""
    if traceparent is None or trace_context_problem(traceparent, "") is not None:
        return None
    return traceparent[3:35]


_LONG_MEMBER_CHARS = 128
"""W3C Trace Context: a list member longer than this is the first to go when truncating."""


def fit_tracestate(tracestate: str) -> str:
    """``tracestate`` cut to ``MAX_TRACESTATE_BYTES`` as W3C Trace Context says to cut it:
    whole list members, first those longer than 128 characters, then from the end. So an
    application's long vendor state costs that state, never the job's enqueue."""
    if len(tracestate.encode()) <= MAX_TRACESTATE_BYTES:
        return tracestate
    members = [member.strip() for member in tracestate.split(",") if member.strip()]
    members = [member for member in members if len(member) <= _LONG_MEMBER_CHARS]
    while members and len(",".join(members).encode()) > MAX_TRACESTATE_BYTES:
        members.pop()
    return ",".join(members)
