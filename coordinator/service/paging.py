"""Page tokens of the list RPCs: opaque to clients, validated and bounded here.

A token is the URL-safe base64 (no padding) of a small versioned payload: a version
byte, a byte naming the list it pages (so a token of one list is refused by another)
and the keyset position, fixed-size binary. Clients get tokens only from a previous
page's ``next_page_token`` and pass them back unchanged; they cannot depend on what is
inside, so it may change with a new version byte.

Decoding accepts exactly what ``encode`` produces: anything else (a different base64
spelling, another version or list, a wrong length, a position out of range) is
INVALID_ARGUMENT on ``page_token`` with reason ``PAGE_TOKEN_INVALID``, before any read.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

from coordinator.errors import InvalidArgument
from coordinator.validation import quote

PAGE_TOKEN_INVALID = "PAGE_TOKEN_INVALID"
"""The ``ErrorInfo`` reason of a page token that is not one this coordinator issued."""
FIELD = "page_token"
VERSION = 1
JOBS = b"j"
"""``ListJobs``: the position is the last listed job's ID (16 bytes, a UUID)."""
AUDIT_EVENTS = b"a"
"""``ListAuditEvents``: the position is the last listed event's ID (8 bytes, big-endian,
1 to 2**63 - 1: a positive SQL BIGINT)."""
SCHEDULES = b"s"
"""``ListSchedules``: the position is the last listed schedule's name (UTF-8)."""
QUEUES = b"q"
"""``ListQueues``: the position is the last listed queue's name (UTF-8)."""
MAX_TOKEN_CHARS = 64
MAX_NAME_TOKEN_CHARS = 1_024
"""A schedule or queue name is at most 128 UTF-16 units: 512 UTF-8 bytes, 686 characters
of base64."""
"""Far above any token issued (24 characters), so a longer one is refused unread."""
MAX_EVENT_ID = 2**63 - 1
_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")


def encode_job_token(job_id: str) -> str:
    """The token of the ``ListJobs`` page after the job ``job_id`` (a canonical UUID)."""
    return _encode(JOBS, uuid.UUID(job_id).bytes)


def decode_job_token(token: str) -> str:
    """The job ID a ``ListJobs`` token continues after, or InvalidArgument."""
    return str(uuid.UUID(bytes=_decode(token, JOBS, 16)))


def encode_audit_token(event_id: int) -> str:
    """The token of the ``ListAuditEvents`` page after the event ``event_id``."""
    if not 1 <= event_id <= MAX_EVENT_ID:
        raise ValueError(f"audit event ID {event_id} is out of range")
    return _encode(AUDIT_EVENTS, event_id.to_bytes(8, "big"))


def decode_audit_token(token: str) -> int:
    """The audit event ID a ``ListAuditEvents`` token continues before, or InvalidArgument."""
    event_id = int.from_bytes(_decode(token, AUDIT_EVENTS, 8), "big")
    if not 1 <= event_id <= MAX_EVENT_ID:
        raise _invalid(token)
    return event_id


def encode_schedule_token(name: str) -> str:
    """The token of the page after the schedule named ``name``."""
    return _encode(SCHEDULES, name.encode("utf-8"))


def decode_schedule_token(token: str) -> str:
    """The schedule name a token of ``ListSchedules`` holds; INVALID_ARGUMENT for anything
    this coordinator did not hand out."""
    return _decode_name(token, SCHEDULES)


def encode_queue_token(name: str) -> str:
    """The token of the ``ListQueues`` page after the queue named ``name``."""
    return _encode(QUEUES, name.encode("utf-8"))


def decode_queue_token(token: str) -> str:
    """The queue name a token of ``ListQueues`` holds; INVALID_ARGUMENT for anything this
    coordinator did not hand out."""
    return _decode_name(token, QUEUES)


def _decode_name(token: str, kind: bytes) -> str:
    raw = _decode(token, kind, None, max_chars=MAX_NAME_TOKEN_CHARS)
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid(token) from None
    if not name or not all(ch.isalnum() or ch in "._-" for ch in name):
        raise _invalid(token)
    return name


def _encode(kind: bytes, position: bytes) -> str:
    payload = bytes([VERSION]) + kind + position
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode("ascii")


def _decode(token: str, kind: bytes, size: int | None, *, max_chars: int = 0) -> bytes:
    """The position a token holds: exactly ``size`` bytes (any length when None)."""
    if (
        len(token) > (max_chars or MAX_TOKEN_CHARS)
        or not token.isascii()
        or _ALPHABET.fullmatch(token) is None
    ):
        raise _invalid(token)
    try:
        payload = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise _invalid(token) from None
    # Only the one spelling encode produces: no padding, no stray low bits in the last
    # character, so equal positions always have equal tokens.
    if size is not None and len(payload) != 2 + size:
        raise _invalid(token)
    if len(payload) < 3 or payload[0] != VERSION or payload[1:2] != kind:
        raise _invalid(token)
    if _encode(kind, payload[2:]) != token:
        raise _invalid(token)
    return payload[2:]


def _invalid(token: str) -> InvalidArgument:
    return InvalidArgument(
        FIELD,
        f"{quote(token)} is not a page token of this list; pass the next_page_token of the "
        "previous page unchanged, or '' for the first page",
        reason=PAGE_TOKEN_INVALID,
    )
