"""Job and attempt IDs: UUIDv7 (RFC 9562), text form ``0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f``."""

from __future__ import annotations

import os
import re
import threading
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.ids import parse_id, uuid7

MAX_MS = 2**48 - 1
CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EXAMPLE = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"

timestamps = st.integers(min_value=0, max_value=MAX_MS)
tails = st.binary(min_size=10, max_size=10)


@given(now_ms=timestamps, tail=tails)
def test_uuid7_is_version_7_with_the_rfc_variant(now_ms: int, tail: bytes) -> None:
    value = uuid.UUID(uuid7(now_ms, tail))
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert value.bytes[6] >> 4 == 0x7
    assert value.bytes[8] >> 6 == 0b10


@given(now_ms=timestamps, tail=tails)
def test_uuid7_carries_the_timestamp_and_the_random_tail(now_ms: int, tail: bytes) -> None:
    raw = uuid.UUID(uuid7(now_ms, tail)).bytes
    assert int.from_bytes(raw[:6], "big") == now_ms
    # Every random bit survives except the 4 version and 2 variant bits.
    assert raw[6] & 0x0F == tail[0] & 0x0F
    assert raw[7] == tail[1]
    assert raw[8] & 0x3F == tail[2] & 0x3F
    assert raw[9:] == tail[3:]


@given(now_ms=timestamps)
def test_uuid7_text_is_canonical(now_ms: int) -> None:
    text = uuid7(now_ms)
    assert CANONICAL.fullmatch(text)
    assert parse_id(text) == text


@given(
    first=st.integers(min_value=0, max_value=MAX_MS - 1),
    gap=st.integers(min_value=1, max_value=MAX_MS),
    tail_a=tails,
    tail_b=tails,
)
def test_uuid7_is_time_ordered_whatever_the_random_tail(
    first: int, gap: int, tail_a: bytes, tail_b: bytes
) -> None:
    later = min(first + gap, MAX_MS)
    earlier_id, later_id = uuid7(first, tail_a), uuid7(later, tail_b)
    assert earlier_id < later_id, "text order is creation order"
    assert uuid.UUID(earlier_id).int < uuid.UUID(later_id).int


def test_uuid7_sorts_a_sequence_of_increasing_times() -> None:
    start = 1_767_225_600_000
    ids = [uuid7(start + step) for step in range(0, 5_000, 7)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_uuid7_without_random_bytes_differs_for_the_same_millisecond() -> None:
    now_ms = 1_767_225_600_000
    ids = {uuid7(now_ms) for _ in range(1_000)}
    assert len(ids) == 1_000
    assert all(int(uuid.UUID(value).bytes[:6].hex(), 16) == now_ms for value in ids)


@pytest.mark.parametrize("now_ms", [0, MAX_MS])
def test_uuid7_accepts_the_48_bit_bounds(now_ms: int) -> None:
    assert int.from_bytes(uuid.UUID(uuid7(now_ms)).bytes[:6], "big") == now_ms


@pytest.mark.parametrize("now_ms", [-1, MAX_MS + 1, 2**64])
def test_uuid7_rejects_a_timestamp_outside_48_bits(now_ms: int) -> None:
    with pytest.raises(ValueError, match="48 bits"):
        uuid7(now_ms)


@pytest.mark.parametrize("size", [0, 9, 11, 16])
def test_uuid7_rejects_a_random_tail_of_the_wrong_size(size: int) -> None:
    with pytest.raises(ValueError, match="10 random bytes"):
        uuid7(1_767_225_600_000, bytes(size))


def test_parse_id_accepts_the_canonical_form() -> None:
    assert parse_id(EXAMPLE) == EXAMPLE


@pytest.mark.parametrize(
    "text", [EXAMPLE.upper(), "0193A7C2-5b1e-7C3D-9f00-1A2B3C4D5E6F", "0193a7c2-5B1E-7c3d-9F00-1a2b3c4d5e6f"]
)
def test_parse_id_accepts_any_letter_case_and_returns_lower_case(text: str) -> None:
    assert parse_id(text) == EXAMPLE


@given(value=st.uuids())
def test_parse_id_round_trips_any_uuid(value: uuid.UUID) -> None:
    assert parse_id(str(value)) == str(value)
    assert parse_id(str(value).upper()) == str(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not-a-uuid",
        "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6",  # one digit short
        "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f0",  # one digit too many
        "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6g",  # not hex
        "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f\n",
        " 0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f",
        "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f ",
        "0193a7c2_5b1e_7c3d_9f00_1a2b3c4d5e6f",
        # int(..., 16) would take these: whitespace, sign and digit separators.
        "0_93a7c25b1e7c3d9f001a2b3c4d5e6f",
        " 193a7c25b1e7c3d9f001a2b3c4d5e6f",
        "+193a7c25b1e7c3d9f001a2b3c4d5e6f",
        # Hyphens in the wrong places.
        "0-1-9-3a7c25b1e7c3d9f001a2b3c4d5e6f",
        "0193a7c25b1e-7c3d-9f00-1a2b-3c4d5e6f",
        "٠١٩٣a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f",  # Arabic-Indic digits
    ],
)
def test_parse_id_rejects_garbage(text: str) -> None:
    assert parse_id(text) is None


@pytest.mark.parametrize("value", [None, 123, b"0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"])
def test_parse_id_rejects_values_that_are_not_text(value: object) -> None:
    assert parse_id(value) is None  # type: ignore[arg-type]


@given(text=st.text(max_size=40))
def test_parse_id_returns_canonical_text_or_none(text: str) -> None:
    parsed = parse_id(text)
    if parsed is not None:
        assert CANONICAL.fullmatch(parsed)
        assert parsed == text.lower()


def test_ids_without_a_given_tail_never_repeat_across_pool_reads() -> None:
    ids = [uuid7(1_000) for _ in range(3 * 256 + 7)]  # three reads of the pool and more
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_tails_of_its_own() -> None:
    """The tails are read ahead per thread; a child must not repeat its parent's."""
    uuid7(1_000)  # the parent's pool holds tails not handed out yet
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ID, to the parent
        os.close(read_end)
        os.write(write_end, uuid7(1_000).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child_id = pipe.read()
    os.waitpid(pid, 0)
    assert child_id != uuid7(1_000)


def test_threads_draw_different_tails() -> None:
    drawn: list[str] = []
    threads = [threading.Thread(target=lambda: drawn.append(uuid7(1_000))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(drawn)) == 8
