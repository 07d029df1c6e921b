"""Codes (R-5 name grammar) and UTF-8-safe truncation (R-6, docs/limits.md), from the wire grammar
both the coordinator and the SDK use (``worker_sdk.grammar``; names: test_names.py)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from coordinator.domain.bounds import DEFAULT_BOUNDS
from worker_sdk.grammar import (
    MAX_CODE_LENGTH,
    MAX_FAILURE_DETAIL_BYTES,
    MAX_FAILURE_MESSAGE_BYTES,
    TRUNCATION_MARKER,
    coerce_code,
    is_valid_code,
    truncate_utf8,
)

# One character of each UTF-8 width: 1, 2, 3 and 4 bytes.
CHARS_BY_WIDTH = {1: "a", 2: "é", 3: "€", 4: "😀"}
MARKERS = ["", TRUNCATION_MARKER, "…", "~"]
VALID_CODES = st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def assert_truncated_correctly(text: str, max_bytes: int, marker: str, result: str) -> None:
    """The contract of truncate_utf8, checked against first principles."""
    # Always valid UTF-8 (a lone surrogate would fail to encode) and within the cap.
    encoded = result.encode("utf-8")
    assert encoded.decode("utf-8") == result
    assert "\ufffd" not in result or "\ufffd" in text
    if _utf8_len(text) <= max_bytes:
        assert result == text, "text that fits is returned unchanged"
        return
    assert len(encoded) <= max_bytes
    marker_fits = _utf8_len(marker) <= max_bytes
    used_marker = marker if marker_fits else ""
    assert result.endswith(used_marker)
    kept = result[: len(result) - len(used_marker)]
    assert text.startswith(kept), "the kept part is a prefix of the original"
    # Nothing was dropped that would have fitted: the next character does not.
    budget = max_bytes - _utf8_len(used_marker)
    assert _utf8_len(kept) <= budget
    assert _utf8_len(kept) + _utf8_len(text[len(kept)]) > budget


# --- codes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["timeout", "ValueError", "payments.capture", "rate_limited", "a-b_c.d", "0", "x" * MAX_CODE_LENGTH],
)
def test_r5_code_grammar_accepts(code: str) -> None:
    assert is_valid_code(code)


@pytest.mark.parametrize(
    "code",
    ["", "x" * (MAX_CODE_LENGTH + 1), "two words", "a/b", "a:b", "Ошибка", "café", "٣", "code\n", "\ttab"],
)
def test_r5_code_grammar_rejects(code: str) -> None:
    assert not is_valid_code(code)


def test_r5_max_code_length_is_128() -> None:
    assert MAX_CODE_LENGTH == 128


@given(code=VALID_CODES)
def test_r5_coerce_code_keeps_a_valid_code(code: str) -> None:
    assert coerce_code(code, "fallback") == code


@given(code=st.text(min_size=1))
def test_r5_coerce_code_makes_any_string_a_valid_code(code: str) -> None:
    coerced = coerce_code(code, "fallback")
    assert is_valid_code(coerced)
    # One character in, one out: bad characters become "_", good ones stay.
    assert len(coerced) == min(len(code), MAX_CODE_LENGTH)
    for original, kept in zip(code, coerced, strict=False):
        assert kept == (original if is_valid_code(original) else "_")


@pytest.mark.parametrize(
    ("code", "expected"),
    [("my error!", "my_error_"), ("Ошибка", "______"), ("MyError\n", "MyError_"), ("a/b:c", "a_b_c")],
)
def test_r5_coerce_code_replaces_bad_characters(code: str, expected: str) -> None:
    assert coerce_code(code, "fallback") == expected


def test_r5_coerce_code_cuts_at_128() -> None:
    code = "E" * 100 + "r" * 100
    assert coerce_code(code, "fallback") == code[:MAX_CODE_LENGTH]


def test_r5_coerce_code_uses_the_fallback_for_an_empty_code() -> None:
    assert coerce_code("", "timeout") == "timeout"


# --- truncate_utf8 ---------------------------------------------------------------------


@pytest.mark.parametrize("width", sorted(CHARS_BY_WIDTH))
@pytest.mark.parametrize("lead", ["", "x", "xy", "xyz"], ids=["lead0", "lead1", "lead2", "lead3"])
@pytest.mark.parametrize("marker", MARKERS, ids=["no-marker", "marker", "ellipsis", "tilde"])
def test_truncate_utf8_at_every_cut_position(width: int, lead: str, marker: str) -> None:
    """Every cap from 0 to past the end, with the multi-byte characters shifted by ``lead``."""
    char = CHARS_BY_WIDTH[width]
    assert _utf8_len(char) == width
    text = lead + char * 6 + "z"
    for max_bytes in range(_utf8_len(text) + 3):
        result = truncate_utf8(text, max_bytes, marker)
        assert_truncated_correctly(text, max_bytes, marker, result)


@pytest.mark.parametrize("width", sorted(CHARS_BY_WIDTH))
def test_truncate_utf8_never_splits_a_character(width: int) -> None:
    char = CHARS_BY_WIDTH[width]
    text = char * 10
    for max_bytes in range(_utf8_len(text)):
        result = truncate_utf8(text, max_bytes)
        assert result == char * (max_bytes // width)


def test_truncate_utf8_mixed_widths_at_every_cut_position() -> None:
    text = "a é € 😀 " * 8 + "".join(CHARS_BY_WIDTH.values()) * 4
    for max_bytes in range(_utf8_len(text) + 2):
        for marker in MARKERS:
            assert_truncated_correctly(text, max_bytes, marker, truncate_utf8(text, max_bytes, marker))


@pytest.mark.parametrize("marker", MARKERS)
def test_truncate_utf8_returns_text_that_fits_unchanged(marker: str) -> None:
    text = "héllo €uro 😀"
    assert truncate_utf8(text, _utf8_len(text), marker) == text
    assert truncate_utf8(text, 10_000, marker) == text
    assert truncate_utf8("", 0, marker) == ""


def test_truncate_utf8_puts_the_marker_inside_the_cap() -> None:
    text = "x" * 100
    result = truncate_utf8(text, 40, TRUNCATION_MARKER)
    assert _utf8_len(result) == 40, "byte-exact with 1-byte characters"
    assert result == "x" * (40 - _utf8_len(TRUNCATION_MARKER)) + TRUNCATION_MARKER


def test_truncate_utf8_with_a_cap_equal_to_the_marker_keeps_only_the_marker() -> None:
    cap = _utf8_len(TRUNCATION_MARKER)
    assert truncate_utf8("y" * 100, cap, TRUNCATION_MARKER) == TRUNCATION_MARKER


def test_truncate_utf8_drops_a_marker_larger_than_the_cap() -> None:
    cap = _utf8_len(TRUNCATION_MARKER) - 1
    assert truncate_utf8("y" * 100, cap, TRUNCATION_MARKER) == "y" * cap


@given(
    text=st.text(),
    max_bytes=st.integers(min_value=0, max_value=300),
    marker=st.sampled_from(MARKERS),
)
@example(text="😀" * 300, max_bytes=MAX_FAILURE_MESSAGE_BYTES, marker="")
@example(text="é" * 600, max_bytes=MAX_FAILURE_MESSAGE_BYTES, marker=TRUNCATION_MARKER)
def test_truncate_utf8_properties(text: str, max_bytes: int, marker: str) -> None:
    assert_truncated_correctly(text, max_bytes, marker, truncate_utf8(text, max_bytes, marker))


@given(text=st.text(min_size=1), max_bytes=st.integers(min_value=0, max_value=200))
def test_truncate_utf8_is_idempotent(text: str, max_bytes: int) -> None:
    once = truncate_utf8(text, max_bytes, TRUNCATION_MARKER)
    assert truncate_utf8(once, max_bytes, TRUNCATION_MARKER) == once


@pytest.mark.parametrize(("width", "kept"), [(1, 1024), (2, 512), (3, 341), (4, 256)])
def test_r6_failure_message_cap_is_1024_bytes(width: int, kept: int) -> None:
    assert MAX_FAILURE_MESSAGE_BYTES == 1_024
    char = CHARS_BY_WIDTH[width]
    message = char * 2_000
    assert truncate_utf8(message, MAX_FAILURE_MESSAGE_BYTES) == char * kept


def test_the_failure_caps_are_the_coordinator_default_bounds() -> None:
    """The SDK cuts before sending what the coordinator would cut by default."""
    assert DEFAULT_BOUNDS.max_failure_message_bytes == MAX_FAILURE_MESSAGE_BYTES
    assert MAX_FAILURE_DETAIL_BYTES == DEFAULT_BOUNDS.max_failure_detail_bytes == 16_384


# --- lone surrogates: never raise, always valid UTF-8 -----------------------------------

LONE_SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff"]


@pytest.mark.parametrize("surrogate", LONE_SURROGATES)
@pytest.mark.parametrize("marker", MARKERS, ids=["no-marker", "marker", "ellipsis", "tilde"])
def test_truncate_utf8_replaces_a_lone_surrogate_in_text_that_fits(surrogate: str, marker: str) -> None:
    text = "before" + surrogate + "after"
    assert truncate_utf8(text, 10_000, marker) == "before?after"


@pytest.mark.parametrize("surrogate", LONE_SURROGATES)
def test_truncate_utf8_replaces_a_lone_surrogate_when_it_cuts(surrogate: str) -> None:
    text = (surrogate + "é") * 50
    for max_bytes in range(40):
        result = truncate_utf8(text, max_bytes, TRUNCATION_MARKER)
        encoded = result.encode("utf-8")  # strict: no surrogate survived
        assert len(encoded) <= max_bytes
        replaced = ("?é" * 50).encode("utf-8")
        assert result == truncate_utf8(replaced.decode("utf-8"), max_bytes, TRUNCATION_MARKER)


def test_truncate_utf8_replaces_a_lone_surrogate_in_the_marker() -> None:
    assert truncate_utf8("x" * 10, 5, "\ud800!") == "xxx?!"


@given(
    text=st.text(alphabet=st.characters(codec=None, exclude_categories=())),
    max_bytes=st.integers(min_value=0, max_value=300),
    marker=st.sampled_from(MARKERS),
)
@example(text="a\ud800b", max_bytes=2, marker="")
@example(text="\udfff" * 400, max_bytes=MAX_FAILURE_MESSAGE_BYTES, marker=TRUNCATION_MARKER)
def test_truncate_utf8_never_raises_and_acts_on_the_replaced_text(
    text: str, max_bytes: int, marker: str
) -> None:
    """Any str, lone surrogates included: the answer is the one for the text with each
    lone surrogate replaced by ``?`` (what a protobuf string can carry)."""
    result = truncate_utf8(text, max_bytes, marker)
    replaced = text.encode("utf-8", errors="replace").decode("utf-8")
    assert_truncated_correctly(replaced, max_bytes, marker, result)
