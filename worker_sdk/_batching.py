"""Coalescing what the worker sends into WorkerBatch messages.

A coordinator that says ``Welcome.batches`` reads releases, starts, results and credit
in one message; the writer then takes everything queued behind the message in hand and
sends it together. gRPC's cost is per message, not per byte, so under load this turns
several messages per job into a few per batch. Heartbeats (and anything else) keep
their own messages and their place in the order.
"""

from __future__ import annotations

import asyncio
from typing import Final

from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

BATCHABLE: Final = frozenset({"release", "start", "result", "credit"})
"""The ConnectRequest kinds a WorkerBatch carries."""

MAX_BATCH_ITEMS: Final = 1_000
"""Items per batch at most (the coordinator accepts up to 10,000 of each kind)."""

MAX_BATCH_BYTES: Final = 1 << 20
"""About how many result bytes (outputs, messages, details) one batch carries, far
below the coordinator's message size bound."""


def batchable(message: pb.ConnectRequest | None) -> bool:
    """True for a message a WorkerBatch can carry."""
    return message is not None and message.WhichOneof("kind") in BATCHABLE


def take_batch(
    first: pb.ConnectRequest, outbox: asyncio.Queue[pb.ConnectRequest | None]
) -> tuple[pb.ConnectRequest, list[pb.ConnectRequest | None]]:
    """One message carrying ``first`` and the batchable messages queued right behind it.

    Returns the message to write and what was taken from ``outbox`` but not put in it
    (the first message a batch cannot carry, or the end of the stream), to be written
    next, in order. A lone message goes out as it is.
    """
    items = [first]
    size = _size(first)
    left: list[pb.ConnectRequest | None] = []
    while not outbox.empty() and len(items) < MAX_BATCH_ITEMS:
        message = outbox.get_nowait()
        if not batchable(message):
            left.append(message)
            break
        assert message is not None
        message_size = _size(message)
        if size + message_size > MAX_BATCH_BYTES:
            left.append(message)
            break
        items.append(message)
        size += message_size
    if len(items) == 1:
        return first, left
    return pb.ConnectRequest(batch=_merge(items)), left


def _merge(items: list[pb.ConnectRequest]) -> pb.WorkerBatch:
    batch = pb.WorkerBatch()
    for item in items:
        kind = item.WhichOneof("kind")
        if kind == "release":
            batch.releases.append(item.release)
        elif kind == "start":
            batch.starts.append(item.start)
        elif kind == "result":
            batch.results.append(item.result)
        else:
            batch.credit += item.credit.count
    return batch


def _size(message: pb.ConnectRequest) -> int:
    if message.WhichOneof("kind") != "result":
        return 0
    result = message.result
    return len(result.output) + len(result.message) + len(result.detail)
