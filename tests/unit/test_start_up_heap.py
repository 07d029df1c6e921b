"""``freeze_start_up_heap``: the start-up's garbage is collected first, then what
survived is frozen (so a full collection under load no longer walks it)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from coordinator.cli.heap import freeze_start_up_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def thawed() -> Iterator[None]:
    """The test process's heap unfrozen again afterwards, as it was."""
    assert gc.get_freeze_count() == 0
    try:
        yield
    finally:
        gc.unfreeze()


def test_garbage_goes_first_and_what_survived_is_frozen(thawed: None) -> None:
    kept = _Node()
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle only the collector frees
    gone = weakref.ref(first)
    del first, second

    frozen = freeze_start_up_heap()

    assert gone() is None  # collected before the freeze, not kept for ever
    assert frozen == gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # frozen: in no generation now
    gc.unfreeze()
    assert any(obj is kept for obj in gc.get_objects())
