"""The wire's text grammar, shared by the SDK and the coordinator (R-5, docs/limits.md).

This is the one implementation of the rules for names (wire names and queues), error
codes, UTF-16 name lengths and UTF-8-safe truncation. The SDK checks them early, so a
mistake shows up at decoration or enqueue time; the coordinator enforces the same
rules and may import this module (the SDK must never import the coordinator).

The module is pure: standard library only, no I/O, no state. The functions here give
verdicts and structured facts; each side words its own error messages from them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CODE_PATTERN",
    "KEY_PUNCTUATION",
    "MAX_CODE_LENGTH",
    "MAX_FAILURE_DETAIL_BYTES",
    "MAX_FAILURE_MESSAGE_BYTES",
    "MAX_NAME_UTF16_UNITS",
    "NAME_PUNCTUATION",
    "TRUNCATION_MARKER",
    "NameFault",
    "NameProblem",
    "coerce_code",
    "concurrency_key_problem",
    "is_name_character",
    "is_valid_code",
    "name_problem",
    "truncate_utf8",
    "utf16_length",
]

MAX_CODE_LENGTH = 128
CODE_PATTERN = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_CODE_LENGTH}}}")
"""Error codes: ASCII letters and digits, ``.``, ``_`` and ``-``, 1-128 characters."""
_NOT_CODE_CHARACTER = re.compile(r"[^A-Za-z0-9._-]")

MAX_NAME_UTF16_UNITS = 128
"""Longest name, in UTF-16 code units (the coordinator's default ``max_wire_name_length``
and its fixed limit for queues)."""
NAME_PUNCTUATION = "._-"
"""The characters besides letters and digits (of any script) that names may hold."""
KEY_PUNCTUATION = ":"
"""What a concurrency key may hold besides a name's characters (``tenant:42``)."""

MAX_FAILURE_MESSAGE_BYTES = 1_024
"""A failure message is cut to this many UTF-8 bytes (R-6)."""
MAX_FAILURE_DETAIL_BYTES = 16_384
"""The SDK cuts a failure's full text to this many UTF-8 bytes (the coordinator's default
``max_failure_detail_bytes``)."""
TRUNCATION_MARKER = "…[truncated]"


def is_valid_code(code: str) -> bool:
    """True when ``code`` follows the code grammar: ``A-Z a-z 0-9 . _ -``, 1-128 chars."""
    return CODE_PATTERN.fullmatch(code) is not None


def coerce_code(code: str, fallback: str) -> str:
    """Makes any string a valid code: bad characters become ``_``, cut at 128.

    Codes come from user exceptions (class names may hold non-ASCII letters); a job's
    record must still be readable by tools that rely on the grammar. An empty ``code``
    gives ``fallback``.
    """
    cleaned = _NOT_CODE_CHARACTER.sub("_", code)[:MAX_CODE_LENGTH]
    return cleaned or fallback


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units: a character outside the BMP counts 2 (docs/limits.md).

    Never raises: a lone surrogate counts 1, as it would in a UTF-16 string.
    """
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


def is_name_character(char: str) -> bool:
    """True for a character names may hold: a letter or digit of any script, ``.``, ``_``, ``-``."""
    return char.isalnum() or char in NAME_PUNCTUATION


class NameFault(StrEnum):
    """What is wrong with a name. When several are, the first in this order is reported."""

    EMPTY = "empty"
    TOO_LONG = "too_long"
    BAD_CHARACTERS = "bad_characters"
    DOTS_ONLY = "dots_only"
    """Only dots (``.``, ``..``): path segments, which break URLs and paths built from names."""


@dataclass(frozen=True, slots=True)
class NameProblem:
    """Why a name breaks the grammar, with the facts an error message needs."""

    fault: NameFault
    length_utf16: int
    """The name's length in UTF-16 code units."""
    limit: int
    """The length limit the name was checked against, in UTF-16 code units."""
    bad_characters: tuple[str, ...] = ()
    """For ``BAD_CHARACTERS``: each offending character once, in order of first appearance."""


@functools.lru_cache(maxsize=4096)
def name_problem(name: str, max_units: int = MAX_NAME_UTF16_UNITS) -> NameProblem | None:
    """Why ``name`` is not a valid name (wire name or queue), or None when it is.

    Names are letters and digits of any script, ``.``, ``_`` and ``-``, at most
    ``max_units`` UTF-16 code units (a character outside the BMP counts 2), and not dots
    alone. The checks run in ``NameFault`` order: empty, then too long, then bad
    characters, then dots only. Never raises,
    whatever the string holds (a lone surrogate is a bad character). Answers are
    remembered (a bounded number): a batch of jobs names the same few queues and types,
    and checking them character by character was a third of an enqueue's validation.
    """
    units = utf16_length(name)
    if not name:
        return NameProblem(NameFault.EMPTY, units, max_units)
    if units > max_units:
        return NameProblem(NameFault.TOO_LONG, units, max_units)
    bad = tuple(dict.fromkeys(ch for ch in name if not is_name_character(ch)))
    if bad:
        return NameProblem(NameFault.BAD_CHARACTERS, units, max_units, bad)
    if not name.strip("."):
        # "." and ".." are path segments: a queue so named turns the dashboard's
        # /queues/<name>/pause into another URL.
        return NameProblem(NameFault.DOTS_ONLY, units, max_units)
    return None


def concurrency_key_problem(key: str) -> NameProblem | None:
    """Why ``key`` is not a valid concurrency key, or None when it is: the name grammar
    (``name_problem``, at most ``MAX_NAME_UTF16_UNITS``) with ``:`` allowed too. The empty
    key is valid: it is the implicit key of every job enqueued without one."""
    if not key:
        return None
    # ':' stands in as '_', a name character of the same length: every other verdict
    # (length, other bad characters, dots alone) is the name grammar's.
    return name_problem(key.replace(KEY_PUNCTUATION, "_"))


def truncate_utf8(text: str, max_bytes: int, marker: str = "") -> str:
    """Cuts ``text`` to at most ``max_bytes`` UTF-8 bytes without splitting a code point.

    When it cuts and a marker is given, the marker is placed inside the cap (a marker
    longer than the cap is left out). Text that already fits is returned unchanged, except
    that lone surrogates, which UTF-8 and protobuf strings cannot carry, always become
    ``?``: the result is valid UTF-8 and the function never raises.
    """
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= max_bytes:
        return encoded.decode("utf-8")
    marker_bytes = marker.encode("utf-8", errors="replace")
    if len(marker_bytes) > max_bytes:
        marker_bytes = b""
    # errors="ignore" drops a code point cut in half at the end, never one in the middle.
    kept = encoded[: max_bytes - len(marker_bytes)].decode("utf-8", errors="ignore")
    return kept + marker_bytes.decode("utf-8")
