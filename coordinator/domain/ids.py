"""UUIDv7 identifiers for jobs and attempts (RFC 9562): time-ordered, random tail."""

from __future__ import annotations

import os
import re
import threading

_MAX_MS = (1 << 48) - 1
# The 8-4-4-4-12 text form only: uuid.UUID alone also takes what int(..., 16) tolerates
# (whitespace, "+", "_"), stray hyphens, braces and "urn:uuid:", so garbage such as
# "0_93a7c25b1e7c3d9f001a2b3c4d5e6f" would name a different job.
_CANONICAL = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")


def uuid7(now_ms: int, random_bytes: bytes | None = None) -> str:
    """Returns a UUIDv7 in text form whose timestamp is ``now_ms``."""
    if not 0 <= now_ms <= _MAX_MS:
        raise ValueError(f"timestamp {now_ms} does not fit in 48 bits")
    tail = random_bytes if random_bytes is not None else _tails.take()
    if len(tail) != 10:
        raise ValueError("a UUIDv7 needs 10 random bytes")
    value = bytearray(now_ms.to_bytes(6, "big") + tail)
    value[6] = 0x70 | (value[6] & 0x0F)  # version 7
    value[8] = 0x80 | (value[8] & 0x3F)  # RFC 4122 variant
    # The text form, as str(uuid.UUID(bytes=...)) gives it, without the object (a few
    # of these a job on the writer).
    text = value.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class _RandomTails(threading.local):
    """Random tails read from the OS a few hundred at a time, per thread. One
    ``os.urandom`` per ID was a system call on the writer for every job and attempt."""

    def __init__(self) -> None:
        self.pool = b""
        self.offset = 0

    def take(self) -> bytes:
        offset = self.offset
        if offset >= len(self.pool):
            self.pool, offset = os.urandom(10 * _TAILS_PER_READ), 0
        self.offset = offset + 10
        return self.pool[offset : offset + 10]

    def forget(self) -> None:
        self.pool, self.offset = b"", 0


_TAILS_PER_READ = 256
_tails = _RandomTails()
# A forked child must not hand out the tails its parent will hand out too.
os.register_at_fork(after_in_child=_tails.forget)


def parse_id(text: str) -> str | None:
    """Returns the canonical text of a UUID, or None when ``text`` is not one.

    Accepts the hyphenated 8-4-4-4-12 hex form in any letter case.
    """
    if not isinstance(text, str) or _CANONICAL.fullmatch(text) is None:
        return None
    return text.lower()  # what str(uuid.UUID(text)) gives for the matched form
