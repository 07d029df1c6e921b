"""What one outbox row holds, and the checks an item passes before it is written.

A row is the encoded ``NewJob`` of the ``Enqueue`` RPC, exactly what the relay will
send, so the relay never needs the job's Python type. The checks are the coordinator's
``Enqueue`` limits (docs/limits.md) at their defaults, applied at write time: an item
the coordinator would refuse is refused in the caller's transaction, with the reason,
instead of being committed and moved aside later. No SQLAlchemy or Django here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from worker_sdk._client_base import ClientBase, EnqueueItem, new_job_id
from worker_sdk._errors import ArgumentError, PayloadTooLarge
from worker_sdk._settings import SettingsLayer
from worker_sdk.grammar import name_problem
from worker_sdk.proto.runwick.v1 import job_service_pb2

DEFAULT_TABLE_NAME = "runwick_outbox"
DEFAULT_NOTIFY_CHANNEL = "runwick_outbox"
"""The PostgreSQL channel a write notifies at commit and relays listen on."""
KEY_PREFIX = "outbox-"
"""Idempotency keys the outbox makes start with this (the item had none of its own)."""


@dataclass(frozen=True, slots=True)
class OutboxLimits:
    """What one outbox row may hold: the coordinator's ``Enqueue`` limits at their
    defaults (docs/limits.md). Raise them here only together with the coordinator's
    (``runwick serve --max-payload-bytes`` ...), or rows will be moved aside as failed."""

    max_payload_bytes: int = 65_536
    """The encoded payload, as ``max_payload_bytes``."""
    max_parents: int = 64
    """Parent IDs of one job, as ``max_parents_per_job``."""
    max_key_length: int = 256
    """Characters of an idempotency or unique key."""
    max_items: int = 500
    """Items of one ``enqueue_many`` call, as ``max_enqueue_batch``."""

    def __post_init__(self) -> None:
        for name in ("max_payload_bytes", "max_parents", "max_key_length", "max_items"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"OutboxLimits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """The column values of one row to insert."""

    job: bytes
    """The encoded ``NewJob``, its idempotency key filled in."""
    idempotency_key: str
    created_at_ms: int
    """Wall-clock time of the write (for the oldest-pending-age metric)."""


class OutboxEncoder(ClientBase):
    """Turns ``EnqueueItem`` values into outbox rows, as a ``Client`` would build its
    ``Enqueue`` request: the same job settings levels (``job_defaults``,
    ``configure_job``, the ``@job`` declaration), the same argument checks, plus the
    limits of ``OutboxLimits``. It opens no connection."""

    def __init__(self, limits: OutboxLimits | None = None) -> None:
        # ClientBase.__init__ wants a connection; the encoder only builds requests, so it
        # sets the two fields request building reads and nothing else.
        self._defaults = SettingsLayer()
        self._configs: dict[type[Any], Any] = {}
        self._limits = limits or OutboxLimits()

    @property
    def limits(self) -> OutboxLimits:
        return self._limits

    def rows(self, items: Iterable[EnqueueItem | object]) -> list[OutboxRow]:
        """One row per item, in order; raises ``ArgumentError`` naming the item's index
        (for more than one) when any item is refused, and then returns nothing."""
        entries = [item if isinstance(item, EnqueueItem) else EnqueueItem(item) for item in items]
        if not entries:
            raise ArgumentError("the outbox needs at least one job to enqueue")
        if len(entries) > self._limits.max_items:
            raise ArgumentError(
                f"{len(entries)} jobs in one outbox write; at most {self._limits.max_items} "
                "(the coordinator's max_enqueue_batch): split them over several calls"
            )
        now_ms = time.time_ns() // 1_000_000
        rows = []
        for index, entry in enumerate(entries):
            try:
                rows.append(self._row(entry, now_ms))
            except ArgumentError as error:
                if len(entries) == 1:
                    raise
                raise ArgumentError(f"job {index}: {error}") from error.__cause__
        return rows

    def _row(self, item: EnqueueItem, now_ms: int) -> OutboxRow:
        message = job_service_pb2.NewJob()
        self._fill_job(message, item)
        self._check_bounds(message)
        if not message.idempotency_key:
            # Made now, inside the caller's transaction, so every send of this row (after
            # a crash, a lost answer, a second relay) names the same job.
            message.idempotency_key = KEY_PREFIX + new_job_id()
        return OutboxRow(message.SerializeToString(), message.idempotency_key, now_ms)

    def _check_bounds(self, message: job_service_pb2.NewJob) -> None:
        limits = self._limits
        size = len(message.payload)
        if size > limits.max_payload_bytes:
            raise PayloadTooLarge(
                f"{message.wire_name}: payload is {size} bytes, over the limit of "
                f"{limits.max_payload_bytes} (max_payload_bytes): store the data elsewhere "
                "and enqueue a reference to it",
                reason="PAYLOAD_TOO_LARGE",
                metadata={
                    "wire_name": message.wire_name,
                    "size_bytes": str(size),
                    "limit_bytes": str(limits.max_payload_bytes),
                },
            )
        for field, name in (("wire name", message.wire_name), ("queue", message.queue)):
            problem = name_problem(name)
            if problem is not None:
                raise ArgumentError(f"{field} {name[:200]!r} is not a valid name ({problem.fault.value})")
        parents = len(set(message.parent_ids))
        if parents > limits.max_parents:
            raise ArgumentError(f"{parents} parents; a job may have at most {limits.max_parents}")
        for field, key in (("idempotency_key", message.idempotency_key), ("unique_key", message.unique_key)):
            if len(key) > limits.max_key_length:
                raise ArgumentError(f"{field} is {len(key)} characters; at most {limits.max_key_length}")


def decode_job(job: bytes) -> job_service_pb2.NewJob:
    """The ``NewJob`` a row holds (raises ``google.protobuf.message.DecodeError`` for
    bytes that are not one)."""
    return job_service_pb2.NewJob.FromString(job)
