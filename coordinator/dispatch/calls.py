"""The answers to the calls a written batch carried (enqueues and cancels): each call's
caller waits on a future for what became of its item, resolved only once the batch's
transaction has committed, or failed with the error that failed the whole batch
(nothing of it was written)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

Outcome = TypeVar("Outcome")


def answer_calls(
    answered: Sequence[asyncio.Future[Outcome]],
    outcomes: Sequence[Outcome] = (),
    failed: BaseException | None = None,
) -> None:
    """Tells each call of a written batch what became of its item: ``outcomes`` in order,
    or ``failed`` for every one."""
    for at, future in enumerate(answered):
        if future.done():  # its caller gave up (the RPC was cancelled)
            continue
        if failed is not None:
            future.set_exception(failed)
        else:
            future.set_result(outcomes[at])
