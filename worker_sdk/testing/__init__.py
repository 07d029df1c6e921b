"""Testing handlers and whole job lifecycles.

- ``run_handler`` / ``run_handler_sync`` run one handler through the worker's own
  pipeline, without a coordinator (``HandlerRun`` is what the worker would report).
- ``Coordinator`` (sync, on a thread of its own) and ``AsyncCoordinator`` (on the test's
  event loop) run a real coordinator over a temporary SQLite file with a virtual clock,
  and a worker for the handlers registered on them: ``advance(timedelta)`` moves every
  timer, ``run_until_idle()`` runs what is runnable now. They need the coordinator
  extra (``pip install 'runwick[testing]'``); importing this module does not.
- ``worker_sdk.testing.pytest_plugin`` gives pytest fixtures for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker_sdk.testing._errors import NotIdle
from worker_sdk.testing._handler import HandlerRun, RawPayload, run_handler, run_handler_sync

if TYPE_CHECKING:
    from worker_sdk.testing._coordinator import AsyncCoordinator
    from worker_sdk.testing._sync import Coordinator

__all__ = [
    "AsyncCoordinator",
    "Coordinator",
    "HandlerRun",
    "NotIdle",
    "RawPayload",
    "run_handler",
    "run_handler_sync",
]


def __getattr__(name: str) -> Any:
    """The coordinators, imported on first use: they need the coordinator extra, which
    an SDK-only install (and ``run_handler``) does without."""
    if name == "AsyncCoordinator":
        from worker_sdk.testing._coordinator import AsyncCoordinator

        return AsyncCoordinator
    if name == "Coordinator":
        from worker_sdk.testing._sync import Coordinator

        return Coordinator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
