"""The store: one SQLAlchemy 2 Core implementation over SQLite and PostgreSQL, whose
methods are named operations over domain values (``Store`` for reads and transactions,
``Tx`` for the writes of one transaction)."""

from coordinator.store.driver_errors import transient_at_start
from coordinator.store.engine import DatabaseTimeouts, UnsupportedDatabase
from coordinator.store.errors import DuplicateKey, StoreError, WriteConflict
from coordinator.store.store import Store
from coordinator.store.tx import Tx
from coordinator.store.tx_queues import UNSET, Unset

__all__ = [
    "UNSET",
    "DatabaseTimeouts",
    "DuplicateKey",
    "Store",
    "StoreError",
    "Tx",
    "Unset",
    "UnsupportedDatabase",
    "WriteConflict",
    "transient_at_start",
]
