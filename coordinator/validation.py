"""Checks of client input that are not lifecycle rules: names, IDs, times (docs/limits.md).

Each check raises ``InvalidArgument`` naming the field, with a machine-readable reason,
and quotes at most a short prefix of what the client sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.domain.ids import parse_id
from coordinator.errors import InvalidArgument
from worker_sdk.grammar import (
    MAX_NAME_UTF16_UNITS,
    NameFault,
    NameProblem,
    concurrency_key_problem,
    name_problem,
)

MAX_WORKER_ID_LENGTH = 256
"""The ``worker_id`` columns' size, in characters."""
_QUOTE_CHARS = 64


def quote(text: str) -> str:
    """``text`` for an error message: repr, cut to a short prefix."""
    if len(text) <= _QUOTE_CHARS:
        return repr(text)
    return f"{text[:_QUOTE_CHARS]!r}… ({len(text)} characters)"


def check_name(
    field: str, name: str, *, index: int | None = None, max_length: int = MAX_NAME_UTF16_UNITS
) -> None:
    """Wire names and queues: letters and digits of any script, ``.``, ``_``, ``-``, not
    dots alone, at most ``max_length`` UTF-16 code units (wire names: ``StoreBounds.max_wire_name_length``;
    queues: 128). The rule is ``worker_sdk.grammar.name_problem``, the SDK's too."""
    problem = name_problem(name, max_length)
    if problem is not None:
        _refuse_name(field, name, problem, index, max_length)


def check_concurrency_key(key: str, *, index: int | None = None) -> None:
    """A job's concurrency key: the name grammar plus ``:``, at most 128 UTF-16 code
    units; '' (the implicit key) is valid. The rule is
    ``worker_sdk.grammar.concurrency_key_problem``, the SDK's too."""
    problem = concurrency_key_problem(key)
    if problem is not None:
        _refuse_name("concurrency_key", key, problem, index, MAX_NAME_UTF16_UNITS, "':'")


def _refuse_name(
    field: str, name: str, problem: NameProblem, index: int | None, max_length: int, extra: str = ""
) -> None:
    if problem.fault is NameFault.EMPTY:
        raise InvalidArgument(field, "must not be empty", index=index, reason="NAME_EMPTY")
    if problem.fault is NameFault.TOO_LONG:
        units = problem.length_utf16
        raise InvalidArgument(
            field,
            f"{quote(name)} is {units} UTF-16 code units, over the limit of {max_length} "
            "(max_wire_name_length; a character outside the BMP counts 2)",
            index=index,
            reason="NAME_TOO_LONG",
            metadata={"length_utf16": units, "limit": max_length},
        )
    if problem.fault is NameFault.DOTS_ONLY:
        raise InvalidArgument(
            field,
            f"{quote(name)} is dots alone, which paths and URLs read as a directory; "
            "add a letter, digit, '_' or '-'",
            index=index,
            reason="NAME_INVALID",
        )
    raise InvalidArgument(
        field,
        f"{quote(name)} holds {problem.bad_characters[0]!r}; allowed are letters and digits of any "
        f"script, '.', '_', '-'{', ' + extra if extra else ''}",
        index=index,
        reason="NAME_INVALID",
    )


def require_id(field: str, text: str, *, index: int | None = None) -> str:
    """The canonical form of a UUID (job or attempt ID), or InvalidArgument."""
    canonical = parse_id(text)
    if canonical is None:
        raise InvalidArgument(
            field,
            f"{quote(text)} is not a UUID (expected the 8-4-4-4-12 hex form, e.g. "
            "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f)",
            index=index,
            reason="INVALID_ID",
        )
    return canonical


def check_parents(
    parent_ids: Sequence[str], max_parents: int, *, index: int | None = None
) -> tuple[str, ...]:
    """docs/limits.md, R-15: well-formed IDs, at most ``max_parents`` after de-duplication.

    Returns the de-duplicated parent IDs in their first order.
    """
    canonical = [require_id(f"parent_ids[{i}]", text, index=index) for i, text in enumerate(parent_ids)]
    unique = tuple(dict.fromkeys(canonical))
    if len(unique) > max_parents:
        raise InvalidArgument(
            "parent_ids",
            f"{len(unique)} distinct parents, over the limit of {max_parents} (max_parents_per_job)",
            index=index,
            reason="TOO_MANY_PARENTS",
            metadata={"count": len(unique), "limit": max_parents},
        )
    return unique


def check_worker_id(field: str, worker_id: str) -> None:
    """1-256 printable characters (no NUL or control characters: they would not store)."""
    if not worker_id or len(worker_id) > MAX_WORKER_ID_LENGTH:
        raise InvalidArgument(
            field,
            f"must be 1 to {MAX_WORKER_ID_LENGTH} characters, got {len(worker_id)}",
            reason="INVALID_ID",
        )
    if not worker_id.isprintable():
        raise InvalidArgument(
            field, f"{quote(worker_id)} holds control characters; use printable text", reason="INVALID_ID"
        )


MAX_FILTER_LENGTH = 256


def check_filter(field: str, value: str | None) -> None:
    """A free-text list filter: at most 256 printable characters (a NUL would not even
    reach PostgreSQL as a query parameter)."""
    if value is None:
        return
    if len(value) > MAX_FILTER_LENGTH:
        raise InvalidArgument(
            field, f"must be at most {MAX_FILTER_LENGTH} characters, got {len(value)}", reason="OUT_OF_RANGE"
        )
    if not value.isprintable():
        raise InvalidArgument(
            field, f"{quote(value)} holds control characters; use printable text", reason="FILTER_INVALID"
        )


MAX_TOKEN_SCOPES = 32
"""Most scope names one token request may list, repeats and blanks included: there are
six scopes, so a request needs far fewer."""
MAX_TOKEN_QUEUES = 1_000
"""Most queues one token may be restricted to."""


def batch_too_large(limit: int, count: int | None = None) -> InvalidArgument:
    """The error for an Enqueue of ``count`` jobs (None: more than ``limit``, counted
    in the raw request before it was parsed) over ``max_enqueue_batch``."""
    counted = f"{count} jobs" if count is not None else f"more than {limit} jobs"
    return InvalidArgument(
        "jobs",
        f"{counted} in one call, over the limit of {limit} (max_enqueue_batch); split the batch",
        reason="BATCH_TOO_LARGE",
        metadata={"count": count if count is not None else f">{limit}", "limit": limit},
    )


def too_many_items(field: str, limit: int, what: str, count: int | None = None) -> InvalidArgument:
    """The error for a repeated field with ``count`` entries (None: more than ``limit``,
    counted in the raw request before it was parsed) over ``limit``."""
    counted = f"{count} {what}" if count is not None else f"more than {limit} {what}"
    return InvalidArgument(
        field,
        f"{counted}, over the limit of {limit}",
        reason="OUT_OF_RANGE",
        metadata={"count": count if count is not None else f">{limit}", "limit": limit},
    )
