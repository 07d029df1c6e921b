"""Natural order of names: ``cq2`` before ``cq10``.

``natural_key`` maps a name to a string whose plain code-point order is the natural
order of the names, so a database orders and pages by it with an ordinary index (no
collation or function of its own): each run of ASCII digits becomes its length without
leading zeros, as three digits, followed by those digits. Any other character stays as
it is. A number's key starts with a digit, as the number does, so numbers keep their
place among the other characters; among numbers the shorter (smaller) one comes first.
Names whose numbers differ only in leading zeros (``q7``, ``q007``) get the same key:
order them by name after the key.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+")
MAX_NATURAL_KEY_CHARS = 640
"""The longest key of a 128-character name: at worst every other character is a
one-digit number, four characters each (``a1a1…``: 64 × 1 + 64 × 4 = 320), with room."""


def natural_key(name: str) -> str:
    """The key that orders ``name`` naturally among others (see the module)."""
    return _DIGITS.sub(_number_key, name)


def _number_key(match: re.Match[str]) -> str:
    digits = match.group().lstrip("0") or "0"
    return f"{len(digits):03d}{digits}"
