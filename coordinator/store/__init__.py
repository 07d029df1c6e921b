"""The store: one SQLAlchemy 2 Core implementation over SQLite and PostgreSQL."""

from coordinator.store.records import AttemptRecord, JobRecord
from coordinator.store.store import Store, StoreError, WriteConflict

__all__ = ["AttemptRecord", "JobRecord", "Store", "StoreError", "WriteConflict"]
