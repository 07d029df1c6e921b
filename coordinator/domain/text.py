"""Names, codes and UTF-8-safe truncation (R-5 code grammar, SPEC §5)."""

from __future__ import annotations

import re

CODE_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")
MAX_CODE_LENGTH = 128
MAX_FAILURE_MESSAGE_BYTES = 1_024
TRUNCATION_MARKER = "…[truncated]"


def is_valid_code(code: str) -> bool:
    """True when ``code`` follows the name grammar: ``A-Z a-z 0-9 . _ -``, 1-128 chars."""
    return CODE_PATTERN.fullmatch(code) is not None


def coerce_code(code: str, fallback: str) -> str:
    """Makes any string a valid code: bad characters become ``_``, cut at 128.

    Codes come from user exceptions (class names may hold non-ASCII letters); a job's
    record must still be readable by tools that rely on the grammar.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", code)[:MAX_CODE_LENGTH]
    return cleaned or fallback


def truncate_utf8(text: str, max_bytes: int, marker: str = "") -> str:
    """Cuts ``text`` to at most ``max_bytes`` UTF-8 bytes without splitting a code point.

    When it cuts and a marker is given, the marker is placed inside the cap. Text that
    already fits is returned unchanged.
    """
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    marker_bytes = marker.encode("utf-8")
    if len(marker_bytes) > max_bytes:
        marker_bytes = b""
    budget = max_bytes - len(marker_bytes)
    # errors="ignore" drops a code point cut in half at the end, never one in the middle.
    kept = encoded[:budget].decode("utf-8", errors="ignore")
    return kept + marker_bytes.decode("utf-8")
