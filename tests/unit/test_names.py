"""The name grammar (R-5, docs/limits.md): one rule in ``worker_sdk.grammar``, worded by each side.

The coordinator's ``check_name`` and the SDK's ``name_problem`` must give the same verdict
for every string, with their own reasons and messages.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from coordinator.domain.bounds import DEFAULT_BOUNDS
from coordinator.errors import InvalidArgument
from coordinator.validation import check_name
from worker_sdk import _text as sdk_text
from worker_sdk.grammar import (
    MAX_NAME_UTF16_UNITS,
    NameFault,
    NameProblem,
    is_name_character,
    name_problem,
    utf16_length,
)

ASTRAL = "𠀀"  # a CJK letter outside the BMP: 2 UTF-16 code units
EMOJI = "😀"  # outside the BMP and not a letter
LONE_SURROGATE = "\ud800"

# Every kind of character a name may meet, lone surrogates included.
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=140)
NAMEISH = st.text(
    alphabet=st.sampled_from(["a", "é", "٣", ".", "_", "-", ASTRAL, " ", "/", EMOJI, LONE_SURROGATE]),
    max_size=140,
)

SDK_REASON = {
    NameFault.EMPTY: "must not be empty",
    NameFault.TOO_LONG: "UTF-16 code units long; the limit is",
    NameFault.BAD_CHARACTERS: "has characters outside letters, digits",
    NameFault.DOTS_ONLY: "not dots alone",
}
COORDINATOR_REASON = {
    NameFault.EMPTY: "NAME_EMPTY",
    NameFault.TOO_LONG: "NAME_TOO_LONG",
    NameFault.BAD_CHARACTERS: "NAME_INVALID",
    NameFault.DOTS_ONLY: "NAME_INVALID",
}


def _coordinator_reason(name: str, max_length: int = MAX_NAME_UTF16_UNITS) -> str | None:
    try:
        check_name("wire_name", name, max_length=max_length)
    except InvalidArgument as error:
        return error.reason
    return None


# --- utf16_length ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "units"),
    [("", 0), ("abc", 3), ("é€", 2), (ASTRAL, 2), (EMOJI * 3, 6), ("a" + ASTRAL + "b", 4)],
)
def test_utf16_length_counts_code_units(text: str, units: int) -> None:
    assert utf16_length(text) == units


@pytest.mark.parametrize("text", [LONE_SURROGATE, "a\udfffb", "\udc00" * 3 + ASTRAL])
def test_utf16_length_counts_a_lone_surrogate_as_one_unit_and_never_raises(text: str) -> None:
    assert utf16_length(text) == len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


# --- the shared rule -------------------------------------------------------------------


def test_the_name_limit_is_the_default_wire_name_bound() -> None:
    assert MAX_NAME_UTF16_UNITS == DEFAULT_BOUNDS.max_wire_name_length == 128


@pytest.mark.parametrize(
    "name", ["payments.capture", "émail_envoi-2", "支払い.確定", "٣", "x" * 128, ASTRAL * 64]
)
def test_valid_names_have_no_problem(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("", NameProblem(NameFault.EMPTY, 0, 128)),
        ("x" * 129, NameProblem(NameFault.TOO_LONG, 129, 128)),
        ("y" * 127 + ASTRAL, NameProblem(NameFault.TOO_LONG, 129, 128)),
        ("a b/c d", NameProblem(NameFault.BAD_CHARACTERS, 7, 128, (" ", "/"))),
        ("emoji" + EMOJI, NameProblem(NameFault.BAD_CHARACTERS, 7, 128, (EMOJI,))),
        ("tab\t", NameProblem(NameFault.BAD_CHARACTERS, 4, 128, ("\t",))),
    ],
)
def test_name_problem_says_what_is_wrong(name: str, expected: NameProblem) -> None:
    assert name_problem(name) == expected


def test_name_problem_checks_against_the_given_limit() -> None:
    assert name_problem("abcd", 4) is None
    assert name_problem("ab" + ASTRAL, 4) is None
    assert name_problem("abc" + ASTRAL, 4) == NameProblem(NameFault.TOO_LONG, 5, 4)


def test_a_too_long_name_is_too_long_before_it_has_bad_characters() -> None:
    """One order on both sides: empty, then too long, then bad characters."""
    name = "a b" * 50
    assert name_problem(name) == NameProblem(NameFault.TOO_LONG, 150, 128)
    assert _coordinator_reason(name) == "NAME_TOO_LONG"
    problem = sdk_text.name_problem(name)
    assert problem == "is 150 UTF-16 code units long; the limit is 128"


@pytest.mark.parametrize("name", [LONE_SURROGATE, "ok" + LONE_SURROGATE, "\udfff.x"])
def test_a_lone_surrogate_is_a_bad_character_on_both_sides(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None and problem.fault is NameFault.BAD_CHARACTERS
    assert problem.bad_characters == tuple(ch for ch in name if "\ud800" <= ch <= "\udfff")
    assert _coordinator_reason(name) == "NAME_INVALID"
    sdk_problem = sdk_text.name_problem(name)
    assert sdk_problem is not None and sdk_problem.startswith(SDK_REASON[NameFault.BAD_CHARACTERS])


def test_a_too_long_name_with_a_lone_surrogate_is_answered_not_raised() -> None:
    """The old SDK check encoded strictly; with length checked first it would have raised."""
    name = "x" * 128 + LONE_SURROGATE
    assert name_problem(name) == NameProblem(NameFault.TOO_LONG, 129, 128)
    assert _coordinator_reason(name) == "NAME_TOO_LONG"
    assert sdk_text.name_problem(name) == "is 129 UTF-16 code units long; the limit is 128"


@given(name=st.one_of(ANY_TEXT, NAMEISH))
@example(name="")
@example(name=LONE_SURROGATE * 200)
@example(name="..")
def test_name_problem_matches_its_definition(name: str) -> None:
    problem = name_problem(name)
    units = utf16_length(name)
    if not name:
        expected = NameFault.EMPTY
    elif units > MAX_NAME_UTF16_UNITS:
        expected = NameFault.TOO_LONG
    elif not all(ch.isalnum() or ch in "._-" for ch in name):
        expected = NameFault.BAD_CHARACTERS
    elif set(name) == {"."}:
        expected = NameFault.DOTS_ONLY
    else:
        assert problem is None
        return
    assert problem is not None
    assert (problem.fault, problem.length_utf16, problem.limit) == (expected, units, MAX_NAME_UTF16_UNITS)
    if expected is NameFault.BAD_CHARACTERS:
        assert problem.bad_characters == tuple(dict.fromkeys(ch for ch in name if not is_name_character(ch)))


@given(name=st.one_of(ANY_TEXT, NAMEISH))
@example(name="a b" * 50)
@example(name="x" * 200 + LONE_SURROGATE)
def test_the_coordinator_and_the_sdk_agree_on_every_name(name: str) -> None:
    problem = name_problem(name)
    coordinator = _coordinator_reason(name)
    sdk = sdk_text.name_problem(name)
    if problem is None:
        assert coordinator is None and sdk is None
        return
    assert coordinator == COORDINATOR_REASON[problem.fault]
    assert sdk is not None and SDK_REASON[problem.fault] in sdk


# --- the coordinator's wording (InvalidArgument) ---------------------------------------


def test_check_name_empty() -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_name("queue", "", index=2)
    error = caught.value
    assert (error.field, error.reason, error.index) == ("jobs[2].queue", "NAME_EMPTY", 2)
    assert error.description == "must not be empty"


def test_check_name_too_long() -> None:
    name = "y" * 127 + ASTRAL
    with pytest.raises(InvalidArgument) as caught:
        check_name("wire_name", name)
    error = caught.value
    assert (error.field, error.reason) == ("wire_name", "NAME_TOO_LONG")
    assert error.description == (
        f"{name[:64]!r}… (128 characters) is 129 UTF-16 code units, over the limit of 128 "
        "(max_wire_name_length; a character outside the BMP counts 2)"
    )
    assert error.metadata == {"length_utf16": "129", "limit": "128"}


def test_check_name_too_long_uses_the_given_limit() -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_name("wire_name", "abcde", max_length=4)
    assert caught.value.description == (
        "'abcde' is 5 UTF-16 code units, over the limit of 4 "
        "(max_wire_name_length; a character outside the BMP counts 2)"
    )
    assert caught.value.metadata == {"length_utf16": "5", "limit": "4"}


@pytest.mark.parametrize(
    ("name", "first_bad"), [("two words", " "), ("a/b c", "/"), ("x" + LONE_SURROGATE, LONE_SURROGATE)]
)
def test_check_name_bad_characters_names_the_first(name: str, first_bad: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_name("queues", name)
    error = caught.value
    assert (error.field, error.reason) == ("queues", "NAME_INVALID")
    assert error.description == (
        f"{name!r} holds {first_bad!r}; allowed are letters and digits of any script, '.', '_', '-'"
    )


@pytest.mark.parametrize("name", [".", "..", "..."])
def test_check_name_refuses_dots_alone(name: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_name("queue", name)
    error = caught.value
    assert (error.field, error.reason) == ("queue", "NAME_INVALID")
    assert error.description == (
        f"{name!r} is dots alone, which paths and URLs read as a directory; add a letter, digit, '_' or '-'"
    )


@pytest.mark.parametrize("name", [".hidden", "a..b", "v1.2", "._", "-.."])
def test_names_with_dots_and_something_else_stay_valid(name: str) -> None:
    assert name_problem(name) is None


# --- the SDK's wording -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ok.name", None),
        (b"bytes", "must be a str, got bytes"),
        (None, "must be a str, got NoneType"),
        ("", "must not be empty"),
        ("x" * 129, "is 129 UTF-16 code units long; the limit is 128"),
        ("b a/a b", "has characters outside letters, digits, '.', '_' and '-': ' /'"),
        ("..", "must hold a letter, digit, '_' or '-', not dots alone"),
    ],
)
def test_sdk_name_problem_messages(name: object, message: str | None) -> None:
    assert sdk_text.name_problem(name) == message
