"""CPU time and peak memory of processes, read from Linux's ``/proc``.

``/proc/<pid>/stat`` gives a process's user and system CPU time in clock ticks (fields
14 and 15) and its parent (field 4); ``/proc/<pid>/status`` its peak resident set
(``VmHWM``). The parsing is pure (``parse_stat``, ``parse_status``) and every reader takes
the ``/proc`` root, so tests can point them at a fake tree. A process that is gone reads
as None: a bench figure then says less, it never fails the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcStat:
    """What the bench needs of one ``/proc/<pid>/stat`` line."""

    pid: int
    comm: str
    """The executable's name, as the kernel keeps it (at most 15 characters)."""
    ppid: int
    cpu_ticks: int
    """utime + stime: CPU the process itself used, in clock ticks (children not included)."""


def parse_stat(text: str) -> ProcStat:
    """Parses a ``/proc/<pid>/stat`` line.

    The command name is in parentheses and may itself hold spaces and parentheses, so
    the fields after it are found from the last ``)``.

    Raises:
        ValueError: The text is not a stat line.
    """
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 1 or close_at < open_at:
        raise ValueError(f"not a /proc stat line: {text[:80]!r}")
    fields = text[close_at + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    if len(fields) < 13:
        raise ValueError(f"not a /proc stat line: {text[:80]!r}")
    return ProcStat(
        pid=int(text[:open_at]),
        comm=text[open_at + 1 : close_at],
        ppid=int(fields[1]),
        cpu_ticks=int(fields[11]) + int(fields[12]),
    )


def parse_status(text: str) -> dict[str, int]:
    """The ``kB`` fields of a ``/proc/<pid>/status`` file (``VmHWM``, ``VmRSS``, ...), in kB."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            values[name] = int(parts[0])
    return values


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """The process's stat, or None when it is gone or unreadable."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError):
        return None


def peak_rss_kb(pid: int, proc: Path = PROC) -> int | None:
    """The process's peak resident set (``VmHWM``) in kB, or None when it is gone."""
    try:
        return parse_status((proc / str(pid) / "status").read_text()).get("VmHWM")
    except OSError:
        return None


def all_stats(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every readable process's stat, by pid."""
    stats: dict[int, ProcStat] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name), proc)
            if stat is not None:
                stats[stat.pid] = stat
    return stats


def descendants(root: int, stats: Mapping[int, ProcStat]) -> set[int]:
    """``root`` and every process below it that is still alive, by parent links."""
    children: dict[int, list[int]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: set[int] = set()
    pending = [root] if root in stats else []
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.add(pid)
            pending.extend(children.get(pid, ()))
    return found


def cpu_ticks(pids: Iterable[int], stats: Mapping[int, ProcStat]) -> dict[int, int]:
    """CPU ticks of each of ``pids`` that is alive in ``stats``."""
    return {pid: stats[pid].cpu_ticks for pid in pids if pid in stats}


def ticks_used(before: Mapping[int, int], after: Mapping[int, int]) -> int:
    """CPU ticks the processes used between two readings.

    A process seen only in ``after`` started in between and counts whole; one seen only
    in ``before`` ended in between and its last ticks are unknown (not counted).
    """
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items())


@dataclass(frozen=True)
class MachineCpu:
    """The first line of ``/proc/stat``: all cores' time in ticks."""

    busy: int
    total: int


def parse_machine_cpu(text: str) -> MachineCpu:
    """Parses ``/proc/stat``'s ``cpu`` line (user nice system idle iowait irq softirq steal ...).

    Raises:
        ValueError: The text does not start with the ``cpu`` line.
    """
    first = text.split("\n", 1)[0].split()
    if not first or first[0] != "cpu" or len(first) < 9:
        raise ValueError(f"not a /proc/stat cpu line: {first!r}")
    ticks = [int(value) for value in first[1:9]]
    idle = ticks[3] + ticks[4]
    return MachineCpu(busy=sum(ticks) - idle, total=sum(ticks))


def machine_cpu(proc: Path = PROC) -> MachineCpu | None:
    """All cores' busy and total ticks, or None without a readable ``/proc/stat``."""
    try:
        return parse_machine_cpu((proc / "stat").read_text())
    except (OSError, ValueError):
        return None
