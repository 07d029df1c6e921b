"""The tenancy rule for parent outputs (``domain.access.may_serve``): a worker token
restricted to queues receives what jobs of those queues produced, and nothing else; an
unrestricted token receives all, including a parent whose queue is no longer known."""

from __future__ import annotations

import pytest

from coordinator.domain.access import may_serve


@pytest.mark.parametrize(
    ("token_queues", "queue", "allowed"),
    [
        (None, "tenant-a", True),
        (None, None, True),
        (frozenset({"tenant-b"}), "tenant-b", True),
        (frozenset({"tenant-b"}), "tenant-a", False),
        (frozenset({"tenant-b"}), None, False),
        (frozenset(), "tenant-a", False),
    ],
)
def test_a_parent_output_goes_only_to_tokens_that_may_serve_its_queue(
    token_queues: frozenset[str] | None, queue: str | None, allowed: bool
) -> None:
    assert may_serve(token_queues, queue) is allowed
