"""CPU seconds per component over the processing phase, and peak memory, from ``/proc``.

Components: the coordinator (its process and any children), the workers (the bench's
worker processes and children, summed), the database when it is a local PostgreSQL
(``database``: the server processes of the scratch database's connections, which are
the coordinator's; ``database_server``: every child of the postmaster, which also holds
the WAL writer, checkpointer and autovacuum, and any other user's sessions), the bench
process itself (producer and sink polling) and ``other``: what else kept the machine's
cores busy in the window (another user's work on a shared machine). What the bench
cannot see (a ``--target`` deployment's coordinator and database) is None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from coordinator.cli.bench import procfs

Pids = Callable[[], set[int]]


@dataclass
class _Reading:
    at: float
    ticks: dict[str, dict[int, int]]
    machine: procfs.MachineCpu | None


@dataclass
class UsageProbe:
    """Reads every component's CPU ticks at ``start`` and ``end`` of the phase."""

    coordinator: int | None
    workers: Sequence[int]
    database: Pids | None = None
    """The database's backend pids (asked at both ends: the pool may open more)."""
    database_server: int | None = None
    """The postmaster's pid."""
    _readings: list[_Reading] = field(default_factory=list)
    _database_pids: set[int] = field(default_factory=set)

    def _read(self) -> None:
        stats = procfs.all_stats()
        groups: dict[str, set[int]] = {
            "workers": set().union(*(procfs.descendants(pid, stats) for pid in self.workers)),
            "bench": {os.getpid()},
        }
        if self.coordinator is not None:
            groups["coordinator"] = procfs.descendants(self.coordinator, stats)
        if self.database is not None:
            self._database_pids |= self.database()
            groups["database"] = set(self._database_pids)
        if self.database_server is not None:
            groups["database_server"] = procfs.descendants(self.database_server, stats)
        ticks = {name: procfs.cpu_ticks(pids, stats) for name, pids in groups.items()}
        self._readings.append(_Reading(time.time(), ticks, procfs.machine_cpu()))

    def start(self) -> None:
        self._readings.clear()
        self._read()

    def end(self) -> None:
        if len(self._readings) == 1:
            self._read()

    def cpu_seconds(self) -> tuple[float | None, dict[str, float | None], float | None]:
        """(window seconds, CPU seconds per component, machine busy percent of all cores)."""
        names = ("coordinator", "workers", "database", "database_server", "bench")
        if len(self._readings) != 2:
            return None, dict.fromkeys(names), None
        before, after = self._readings
        seconds: dict[str, float | None] = {}
        for name in names:
            if name in after.ticks:
                used = procfs.ticks_used(before.ticks.get(name, {}), after.ticks[name])
                seconds[name] = used / procfs.CLOCK_TICKS_PER_S
            else:
                seconds[name] = None
        busy_pct = None
        if before.machine is not None and after.machine is not None:
            busy = after.machine.busy - before.machine.busy
            total = after.machine.total - before.machine.total
            busy_pct = 100.0 * busy / total if total else None
            # database_server holds the database's backends: count the server once.
            server = (
                seconds["database_server"] if seconds["database_server"] is not None else seconds["database"]
            )
            known = sum(seconds[name] or 0.0 for name in ("coordinator", "workers", "bench")) + (
                server or 0.0
            )
            seconds["other"] = max(busy / procfs.CLOCK_TICKS_PER_S - known, 0.0)
        else:
            seconds["other"] = None
        return after.at - before.at, seconds, busy_pct


def peak_memory_kb(roots: Sequence[int]) -> list[int | None]:
    """Each root process's peak resident set (``VmHWM``) in kB, plus its children's peaks
    when it has any (an upper bound of their peak together); None for a process gone."""
    stats = procfs.all_stats()
    peaks: list[int | None] = []
    for root in roots:
        values = [procfs.peak_rss_kb(pid) for pid in procfs.descendants(root, stats)]
        known = [value for value in values if value is not None]
        peaks.append(sum(known) if known else None)
    return peaks
