"""The hot path: worker sessions, credit, and the batch loop that pushes work."""

from coordinator.dispatch.dispatcher import Dispatcher, ReservedClaims
from coordinator.dispatch.sessions import (
    Assignments,
    CancelNotice,
    Delivery,
    DrainNotice,
    WorkerHello,
    WorkerSession,
)

__all__ = [
    "Assignments",
    "CancelNotice",
    "Delivery",
    "Dispatcher",
    "DrainNotice",
    "ReservedClaims",
    "WorkerHello",
    "WorkerSession",
]
