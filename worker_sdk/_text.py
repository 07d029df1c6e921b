"""The SDK's wording of the name grammar's verdicts (R-5, docs/limits.md).

The grammar itself is ``worker_sdk.grammar``, shared with the coordinator; this module
only turns its answer into the message ``@job`` raises, so a bad wire name shows up at
decoration time, close to the code that made it.
"""

from __future__ import annotations

from worker_sdk.grammar import NameFault, NameProblem, concurrency_key_problem
from worker_sdk.grammar import name_problem as _grammar_problem


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid wire name, or None when it is.

    Wire names are letters and digits of any script, ``.``, ``_`` and ``-``, at most 128
    UTF-16 code units (a character outside the BMP counts 2), and not dots alone.
    """
    if not isinstance(name, str):
        return f"must be a str, got {type(name).__name__}"
    return _worded(_grammar_problem(name), "'.', '_' and '-'")


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid concurrency key (a name, ``:`` allowed too; '' is the
    implicit key), or None when it is."""
    return _worded(concurrency_key_problem(key), "'.', '_', '-' and ':'")


def _worded(problem: NameProblem | None, punctuation: str) -> str | None:
    if problem is None:
        return None
    if problem.fault is NameFault.EMPTY:
        return "must not be empty"
    if problem.fault is NameFault.TOO_LONG:
        return f"is {problem.length_utf16} UTF-16 code units long; the limit is {problem.limit}"
    if problem.fault is NameFault.DOTS_ONLY:
        return "must hold a letter, digit, '_' or '-', not dots alone"
    bad = "".join(sorted(problem.bad_characters))
    return f"has characters outside letters, digits, {punctuation}: {bad!r}"
