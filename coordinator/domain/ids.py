"""UUIDv7 identifiers for jobs and attempts (RFC 9562): time-ordered, random tail."""

from __future__ import annotations

import os
import uuid

_MAX_MS = (1 << 48) - 1


def uuid7(now_ms: int, random_bytes: bytes | None = None) -> str:
    """Returns a UUIDv7 in text form whose timestamp is ``now_ms``."""
    if not 0 <= now_ms <= _MAX_MS:
        raise ValueError(f"timestamp {now_ms} does not fit in 48 bits")
    tail = random_bytes if random_bytes is not None else os.urandom(10)
    if len(tail) != 10:
        raise ValueError("a UUIDv7 needs 10 random bytes")
    value = bytearray(now_ms.to_bytes(6, "big") + tail)
    value[6] = 0x70 | (value[6] & 0x0F)  # version 7
    value[8] = 0x80 | (value[8] & 0x3F)  # RFC 4122 variant
    return str(uuid.UUID(bytes=bytes(value)))


def parse_id(text: str) -> str | None:
    """Returns the canonical text of a UUID, or None when ``text`` is not one."""
    try:
        return str(uuid.UUID(text))
    except (ValueError, AttributeError, TypeError):
        return None
