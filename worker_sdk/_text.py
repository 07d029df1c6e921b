"""Name and code grammar, and UTF-8-safe truncation (R-5, SPEC §5).

The coordinator enforces the same rules; the SDK checks them early so a mistake shows up
at decoration or enqueue time, close to the code that made it.
"""

from __future__ import annotations

import re

CODE_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")
MAX_CODE_LENGTH = 128
MAX_NAME_UTF16_UNITS = 128
MAX_FAILURE_MESSAGE_BYTES = 1_024
MAX_FAILURE_DETAIL_BYTES = 16_384
TRUNCATION_MARKER = "…[truncated]"


def is_valid_code(code: str) -> bool:
    """True when ``code`` follows the name grammar: ``A-Z a-z 0-9 . _ -``, 1-128 chars."""
    return CODE_PATTERN.fullmatch(code) is not None


def coerce_code(code: str, fallback: str) -> str:
    """Makes any string a valid code: bad characters become ``_``, cut at 128."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", code)[:MAX_CODE_LENGTH]
    return cleaned or fallback


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid wire name, or None when it is.

    Wire names are letters and digits of any script, ``.``, ``_`` and ``-``, at most 128
    UTF-16 code units (a character outside the BMP counts 2).
    """
    if not isinstance(name, str):
        return f"must be a str, got {type(name).__name__}"
    if not name:
        return "must not be empty"
    bad = sorted({ch for ch in name if not (ch.isalnum() or ch in "._-")})
    if bad:
        return f"has characters outside letters, digits, '.', '_' and '-': {''.join(bad)!r}"
    units = len(name.encode("utf-16-le")) // 2
    if units > MAX_NAME_UTF16_UNITS:
        return f"is {units} UTF-16 code units long; the limit is {MAX_NAME_UTF16_UNITS}"
    return None


def truncate_utf8(text: str, max_bytes: int, marker: str = "") -> str:
    """Cuts ``text`` to at most ``max_bytes`` UTF-8 bytes without splitting a code point.

    When it cuts and a marker is given, the marker is placed inside the cap. Lone
    surrogates (which protobuf strings cannot carry) become ``?``.
    """
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= max_bytes:
        return encoded.decode("utf-8")
    marker_bytes = marker.encode("utf-8")
    if len(marker_bytes) > max_bytes:
        marker_bytes = b""
    kept = encoded[: max_bytes - len(marker_bytes)].decode("utf-8", errors="ignore")
    return kept + marker_bytes.decode("utf-8")
