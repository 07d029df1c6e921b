"""``natural_key``: plain code-point order of the keys is the names' natural order."""

from __future__ import annotations

import random

from coordinator.domain.naming import MAX_NATURAL_KEY_CHARS, natural_key


def test_numbers_sort_by_value_and_text_around_them_as_before() -> None:
    names = ["cq10", "cq2", "cq1", "cq100", "cq", "cq-1", "cq.9", "cqa", "b7", "b07x", "0", "q9a2", "q9a10"]
    ordered = sorted(names, key=lambda name: (natural_key(name), name))
    assert ordered == [
        "0",
        "b7",
        "b07x",
        "cq",
        "cq-1",
        "cq.9",
        "cq1",
        "cq2",
        "cq10",
        "cq100",
        "cqa",
        "q9a2",
        "q9a10",
    ]


def test_equal_values_with_leading_zeros_share_a_key_and_the_name_decides() -> None:
    assert natural_key("q7") == natural_key("q007") == natural_key("q0007")
    assert natural_key("q0") == natural_key("q000")


def test_numbers_keep_their_order_among_random_names() -> None:
    chooser = random.Random(20_261_206)
    for _ in range(2_000):
        a, b = chooser.randrange(10**6), chooser.randrange(10**6)
        prefix = chooser.choice(["", "q", "q-", "日本"])
        if a != b:
            assert (natural_key(f"{prefix}{a}x") < natural_key(f"{prefix}{b}x")) == (a < b)


def test_the_longest_key_of_a_128_character_name_fits_the_column() -> None:
    worst = "a1" * 64
    assert len(natural_key(worst)) <= MAX_NATURAL_KEY_CHARS
    assert len(natural_key("9" * 128)) <= MAX_NATURAL_KEY_CHARS
