"""The hot path: worker sessions, credit, and the batch loop that pushes work."""

from coordinator.dispatch.deliveries import (
    Assignments,
    CancelNotice,
    Delivery,
    DrainNotice,
    WorkerHello,
)
from coordinator.dispatch.dispatcher import Dispatcher
from coordinator.dispatch.sessions import WorkerSession

__all__ = [
    "Assignments",
    "CancelNotice",
    "Delivery",
    "Dispatcher",
    "DrainNotice",
    "WorkerHello",
    "WorkerSession",
]
