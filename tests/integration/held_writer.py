"""A writer held mid-batch: the batching tests of enqueue calls and cancels hold the
writer inside one of ``service.batch``'s item writers, so that calls pile up behind it
and the next batch takes them together."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.service import batch as batch_module


class HeldWriter:
    """Holds every batch that calls ``batch_module.<writer>`` until ``released`` is set,
    and records how many items (its ``items_at``-th argument) each such batch wrote."""

    def __init__(self, writer: str, items_at: int) -> None:
        self.writer = writer
        self.items_at = items_at
        self.released = threading.Event()
        self.held = 0
        self.items_per_batch: list[int] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        original = getattr(batch_module, self.writer)

        def held_writer(*args: Any) -> Any:
            self.held += 1
            assert self.released.wait(30), "the test never released the writer"
            self.items_per_batch.append(len(args[self.items_at]))
            return original(*args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(batch_module, self.writer, held_writer)
            try:
                yield
            finally:
                self.released.set()
