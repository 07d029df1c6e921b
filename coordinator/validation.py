"""Checks of client input that are not lifecycle rules (names for now; SPEC §5)."""

from __future__ import annotations

from coordinator.errors import InvalidArgument

MAX_NAME_UTF16_UNITS = 128


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units: a character outside the BMP counts 2 (SPEC §5)."""
    return len(text.encode("utf-16-le")) // 2


def check_name(field: str, name: str, *, index: int | None = None) -> None:
    """Wire names and queues: letters and digits of any script, ``.``, ``_``, ``-``."""
    if not name:
        raise InvalidArgument(field, "must not be empty", index=index)
    if utf16_length(name) > MAX_NAME_UTF16_UNITS:
        raise InvalidArgument(
            field,
            f"is {utf16_length(name)} UTF-16 code units, the limit is {MAX_NAME_UTF16_UNITS}",
            index=index,
        )
    bad = [ch for ch in name if not (ch.isalnum() or ch in "._-")]
    if bad:
        raise InvalidArgument(
            field, f"{name!r} holds {bad[0]!r}; allowed are letters, digits, '.', '_', '-'", index=index
        )
