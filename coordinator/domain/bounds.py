"""The store's named limits (docs/limits.md): ``StoreBounds``, their defaults and ranges.

Which of three behaviours applies follows from what the data is for:

- **reject** size caps on data that is read back and deserialized (payload, wire name,
  parents, output): a clipped value would corrupt its reader, so the write fails loudly
  and the store is left as it was;
- **clamp** batch and page sizes silently: a request for more is served up to the cap;
- **truncate** write-only diagnostics (failure detail and message) and drop the oldest
  entries of unbounded history.

A store configured without explicit bounds uses ``StoreBounds()``; change one bound with
``dataclasses.replace(StoreBounds(), max_payload_bytes=131_072)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from worker_sdk.trace_rules import TRACE_CONTEXT_WIRE_BYTES

KIB = 1_024
MIB = 1_024 * KIB

MESSAGE_HEADROOM_BYTES = 4 * MIB
"""Slack over the largest valid message, so a request a little over a bound still
arrives and gets the bound's clear error instead of the transport's."""
_INT32_MAX = 2**31 - 1
# What a NewJob holds besides its payload, at the bounds' worst case: the idempotency key
# (256 characters of up to 4 UTF-8 bytes), the concurrency key (128 UTF-16 units of up to
# 3 UTF-8 bytes each), settings, numbers and field framing. The trace context at its
# bounds is counted apart (worker_sdk.trace_rules).
_NEW_JOB_FIXED_BYTES = 256 * 4 + 128 * 3 + 512 + TRACE_CONTEXT_WIRE_BYTES
# Bytes per parent ID on the wire (36 characters plus framing).
_ID_BYTES = 40
# Job fields besides payload, output and names in a read or an assignment.
_JOB_FIXED_BYTES = 2 * KIB + TRACE_CONTEXT_WIRE_BYTES


class BoundsError(ValueError):
    """A bound is out of its range; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class StoreBounds:
    """The limits the coordinator enforces on what it stores (docs/limits.md).

    Every field is configurable (``runwick serve`` flags, ``RUNWICK_*`` variables or the
    ``[bounds]`` table of the config file); ``RANGES`` holds what each may be set to.
    """

    max_payload_bytes: int = 65_536
    """Largest job payload. Reject: the enqueue fails with INVALID_ARGUMENT naming the
    wire name and the byte count (store a reference to bulk data instead)."""
    max_wire_name_length: int = 128
    """Longest wire name, in UTF-16 code units: a character outside the BMP counts 2.
    Reject. (Queue names follow the same grammar with a fixed 128.)"""
    max_parents_per_job: int = 64
    """Most parents one job may declare, counted after de-duplication. Reject."""
    max_output_bytes: int = 65_536
    """Largest job output on a success write. Reject the write (``JobOutputTooLarge``);
    the store is untouched and the SDK then records ``output_too_large``."""
    max_failure_detail_bytes: int = 16_384
    """Full exception text kept per attempt. Truncate: byte-exact, never splitting a
    UTF-8 code point, with a truncation marker inside the cap."""
    max_failure_message_bytes: int = 1_024
    """Failure message kept per attempt. Truncate, UTF-8 safe (R-6)."""
    max_claim_batch: int = 128
    """Most jobs one claim hands one worker. Clamp silently (the rest of its credit is
    claimed right after). 128: a worker's whole default concurrency in one claim;
    smaller claims cost a transaction each (32 gave 12% less throughput)."""
    max_purge_batch: int = 1_000
    """Most jobs one retention pass purges per transaction (R-19). Clamp silently."""
    max_page_size: int = 500
    """Most jobs one list page returns. Clamp silently."""
    max_history_per_job: int = 100
    """State transitions kept per job; the oldest are dropped."""
    max_skipped_ticks: int = 100
    """Skipped schedule ticks kept per schedule (R-18); the oldest are dropped."""
    max_enqueue_batch: int = 500
    """Most jobs one Enqueue call may carry. Reject. Together with ``max_payload_bytes``
    it sizes the gRPC message limit (``max_message_bytes``)."""
    max_queues: int = 10_000
    """Most queues a deployment knows at once. Reject: an enqueue that would create a
    queue past it fails with RESOURCE_EXHAUSTED (``QUEUE_LIMIT_REACHED``) and changes
    nothing; enqueues to existing queues are unaffected. Checked only when a queue is
    new, so it costs the hot path nothing."""

    def validate(self) -> StoreBounds:
        """Returns self, or raises BoundsError naming the first bound out of range."""
        for item in fields(self):
            value = getattr(self, item.name)
            low, high = RANGES[item.name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise BoundsError(item.name, f"must be a whole number, got {value!r}")
            if not low <= value <= high:
                raise BoundsError(item.name, f"must be {low} to {high}, got {value}")
        if self.max_message_bytes() > _INT32_MAX:
            raise BoundsError(
                "max_enqueue_batch",
                f"a batch of {self.max_enqueue_batch} jobs of {self.max_payload_bytes} bytes needs "
                f"{self.max_message_bytes()}-byte gRPC messages, over the 2 GiB gRPC limit; "
                "lower max_enqueue_batch or max_payload_bytes",
            )
        return self

    # -- clamp ---------------------------------------------------------------------------

    def clamp_claim_batch(self, requested: int) -> int:
        """How many jobs a claim for ``requested`` takes: at most ``max_claim_batch``."""
        return max(0, min(requested, self.max_claim_batch))

    def clamp_page_size(self, requested: int) -> int:
        """The page size served for ``requested`` (>= 1): at most ``max_page_size``."""
        return max(1, min(requested, self.max_page_size))

    def clamp_purge_batch(self, requested: int) -> int:
        """How many jobs one purge transaction removes: at most ``max_purge_batch``."""
        return max(0, min(requested, self.max_purge_batch))

    # -- transport -----------------------------------------------------------------------

    def max_message_bytes(self) -> int:
        """The gRPC message size these bounds need, in both directions.

        It fits the largest valid message — an Enqueue of ``max_enqueue_batch`` jobs at
        ``max_payload_bytes`` with every other field at its bound, an assignment carrying
        every parent's output, a page of jobs — plus ``MESSAGE_HEADROOM_BYTES``, so a
        request just over a bound reaches the coordinator and gets that bound's clear
        error. A message far over the limit is refused by gRPC with RESOURCE_EXHAUSTED.
        """
        # A UTF-16 code unit takes at most 3 UTF-8 bytes (a surrogate pair: 4 for 2).
        names = 2 * 3 * self.max_wire_name_length
        parents = self.max_parents_per_job * _ID_BYTES
        new_job = self.max_payload_bytes + names + parents + _NEW_JOB_FIXED_BYTES
        enqueue = self.max_enqueue_batch * new_job
        job = self.max_payload_bytes + self.max_output_bytes + names + parents + _JOB_FIXED_BYTES
        parent_output = self.max_output_bytes + _ID_BYTES + TRACE_CONTEXT_WIRE_BYTES
        assignment = job + self.max_parents_per_job * parent_output
        page = self.max_page_size * (names + parents + _JOB_FIXED_BYTES)
        return max(enqueue, assignment, page) + MESSAGE_HEADROOM_BYTES


RANGES: dict[str, tuple[int, int]] = {
    "max_payload_bytes": (1, 16 * MIB),
    # The name columns hold 256 characters; a UTF-16 unit is at most one character.
    "max_wire_name_length": (1, 256),
    "max_parents_per_job": (1, 1_000),
    "max_output_bytes": (1, 16 * MIB),
    # Room for the truncation marker and some text.
    "max_failure_detail_bytes": (64, 16 * MIB),
    "max_failure_message_bytes": (64, 1 * MIB),
    "max_claim_batch": (1, 1_000),
    "max_purge_batch": (1, 100_000),
    "max_page_size": (1, 10_000),
    "max_history_per_job": (1, 100_000),
    "max_skipped_ticks": (1, 100_000),
    "max_enqueue_batch": (1, 10_000),
    "max_queues": (1, 1_000_000),
}
"""The inclusive range each bound may be configured to."""

DEFAULT_BOUNDS = StoreBounds()


@dataclass(frozen=True, slots=True)
class StreamBounds:
    """What one worker stream may name, and make the coordinator hold for it
    (docs/limits.md, "Worker streams"). Fixed: a real worker stays far inside them."""

    max_hello_queues: int = 100
    """Most queues one Hello may list. A claim reads each of them; INVALID_ARGUMENT past it."""
    max_hello_wire_names: int = 1_000
    """Most wire names one Hello may list. Every claim read binds them all."""
    max_capacity: int = 10_000
    """Most jobs one worker stream runs at once (``Hello.capacity``)."""
    max_heartbeat_attempts: int = 10_000
    """Most attempt IDs one heartbeat may name; more ends the stream."""
    stream_control_items: int = 16
    """Items a stream may have pending on top of twice its capacity (heartbeats, releases
    of a reconnect)."""
    max_pending_batch_items: int = 50_000
    """Most starts, results, releases and heartbeats waiting, from all streams together,
    for the next write: past it every stream's reader waits until that batch is taken."""

    def stream_budget(self, capacity: int) -> int:
        """Items one stream may have taken in and not yet answered: a worker holding
        ``capacity`` attempts has at most a start or release and a result of each out
        (after a reconnect it re-sends them all), plus a few control messages."""
        return 2 * capacity + self.stream_control_items

    def unheld_heartbeat_checks(self, capacity: int) -> int:
        """Attempt IDs the stream was not assigned that its heartbeats may have looked up
        in the store, over its whole life: a reconnecting worker names each attempt it
        holds from an earlier stream once, and it holds at most ``capacity``."""
        return 2 * capacity


STREAM_BOUNDS = StreamBounds()
