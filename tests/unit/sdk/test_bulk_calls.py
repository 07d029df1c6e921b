"""The SDK's bulk calls refuse what the coordinator would, before any call."""

from __future__ import annotations

import pytest

from worker_sdk import ArgumentError, Client


@pytest.mark.parametrize(
    "filters",
    [{}, {"state": "nonsense"}, {"queue": 7}],
    ids=["no-filter", "unknown-state", "queue-not-str"],
)
def test_bulk_calls_check_their_filter_first(filters: dict[str, object]) -> None:
    with Client("127.0.0.1:1") as client:  # nothing listens: no call may be made
        for call in (client.bulk_cancel, client.bulk_retry):
            with pytest.raises(ArgumentError) as refused:
                call(**filters)  # type: ignore[arg-type]
            assert refused.value.status_code is None  # found by the SDK, not the coordinator
