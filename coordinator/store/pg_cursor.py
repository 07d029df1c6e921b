"""PostgreSQL: ``executemany`` as one execution per parameter set, each answered on its own.

psycopg runs ``executemany`` in pipeline mode (libpq's), and leaving that mode sends a
Flush after the Sync. The server then reads that Flush while idle inside the transaction
and does not arm ``idle_in_transaction_session_timeout`` again (seen on PostgreSQL 15:
``pg_stat_activity`` shows the session idle in its transaction, and nothing ends it). A
coordinator frozen (SIGSTOP, a paused VM) right after any multi-row write of a
transaction would so hold its row locks for good, which the timeout exists to prevent
(``store.engine``; README.md, "Timeouts"). Every connection the store opens uses this cursor:
its ``executemany`` runs ``execute`` per parameter set, each ending with its own Sync, so
the timeout holds between any two statements. Writes of many rows go out as one
statement of arrays instead (``store.pg_arrays``), so this costs round trips only for a
few rows at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg


class OneSyncPerStatementCursor(psycopg.Cursor[Any]):
    """A psycopg cursor whose ``executemany`` never enters pipeline mode (see above);
    its ``rowcount`` after one is the rows all the executions changed."""

    _rows_changed: int | None = None

    def execute(self, *args: Any, **kwargs: Any) -> OneSyncPerStatementCursor:
        self._rows_changed = None
        super().execute(*args, **kwargs)
        return self

    def executemany(self, query: Any, params_seq: Iterable[Any], *, returning: bool = False) -> None:
        if returning:  # the rows of every execution: psycopg's own (no caller of ours asks)
            super().executemany(query, params_seq, returning=True)
            return
        changed = 0
        for params in params_seq:
            super().execute(query, params)
            changed += max(super().rowcount, 0)
        self._rows_changed = changed

    @property
    def rowcount(self) -> int:
        if self._rows_changed is not None:
            return self._rows_changed
        return super().rowcount
