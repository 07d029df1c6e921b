"""pytest fixtures for the test coordinator.

Installed with the package, pytest loads this plugin by itself (the ``pytest11`` entry
point); without the entry point, name it in the project's top ``conftest.py``::

    pytest_plugins = ["worker_sdk.testing.pytest_plugin"]

Fixtures:

- ``runwick_coordinator``: a started ``worker_sdk.testing.Coordinator`` (sync API, its
  own thread), closed after the test. Mark a test
  ``@pytest.mark.runwick_coordinator(start=..., lease=...)`` to pass it arguments.
- ``runwick_client``: its ``Client``.

Async tests use ``async with AsyncCoordinator() as coordinator:`` on their own loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from worker_sdk._client import Client
    from worker_sdk.testing._sync import Coordinator


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "runwick_coordinator(**arguments): arguments of the runwick_coordinator fixture's Coordinator",
    )


@pytest.fixture
def runwick_coordinator(request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    """A started test coordinator with a virtual clock; closed after the test."""
    from worker_sdk.testing._sync import Coordinator

    marker = request.node.get_closest_marker("runwick_coordinator")
    arguments = dict(marker.kwargs) if marker is not None else {}
    with Coordinator(**arguments) as coordinator:
        yield coordinator


@pytest.fixture
def runwick_client(runwick_coordinator: Coordinator) -> Client:
    """A ``Client`` bound to ``runwick_coordinator``."""
    return runwick_coordinator.client
