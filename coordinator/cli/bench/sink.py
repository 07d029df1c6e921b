"""What bench handlers record, one line per run, and what the bench reads back.

Each worker process appends to its own ``sink-<pid>.log`` in the run's sink folder with
one ``os.write`` per line on an ``O_APPEND`` descriptor, so lines never interleave and
a crash loses at most the line being written. A line is
``<n> <enqueued_at> <started_at> <ended_at> <pid>``: the job's number, the producer's
clock just before the enqueue call that carried it, and the handler's clock when it was
called and when it returned (``time.time()`` seconds, one host's clock).

Numbers: ``n >= 0`` are measured jobs, ``BACKLOG`` marks backlog jobs, lower ones are
warm-up jobs. The exactly-once check (``tally``) counts handler runs per measured number.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

SINK_PREFIX = "sink-"
READY_PREFIX = "ready-"
BACKLOG = -1
"""``n`` of every backlog job."""
FIRST_WARMUP = -2
"""``n`` of the first warm-up job; the next ones count down."""


@dataclass(frozen=True, slots=True)
class Record:
    """One handler run."""

    n: int
    enqueued_at: float
    started_at: float
    ended_at: float
    pid: int


def format_record(record: Record) -> bytes:
    return (
        f"{record.n} {record.enqueued_at:.6f} {record.started_at:.6f} {record.ended_at:.6f} {record.pid}\n"
    ).encode()


def parse_record(line: str) -> Record:
    """Parses one sink line. Raises ValueError for anything else."""
    parts = line.split()
    if len(parts) != 5:
        raise ValueError(f"not a bench sink line: {line!r}")
    return Record(int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4]))


class SinkWriter:
    """Appends this process's records to its own file in the sink folder."""

    def __init__(self, folder: Path) -> None:
        path = folder / f"{SINK_PREFIX}{os.getpid()}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: Record) -> None:
        os.write(self._fd, format_record(record))

    def close(self) -> None:
        os.close(self._fd)


class SinkReader:
    """Reads the sink folder's new complete lines on every ``poll`` (cheap to repeat)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._offsets: dict[Path, int] = {}
        self.records: list[Record] = []

    def skip_existing(self) -> None:
        """Ignores what the folder's files already hold (an earlier run's records)."""
        for path in self._folder.glob(f"{SINK_PREFIX}*.log"):
            self._offsets[path] = path.stat().st_size

    def poll(self) -> int:
        """Reads what was appended since the last poll; returns how many records it added."""
        added = 0
        for path in sorted(self._folder.glob(f"{SINK_PREFIX}*.log")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as file:
                file.seek(offset)
                data = file.read()
            complete = data.rfind(b"\n") + 1  # a line being written is read next time
            if complete:
                for line in data[:complete].decode().splitlines():
                    self.records.append(parse_record(line))
                    added += 1
                self._offsets[path] = offset + complete
        return added


@dataclass(frozen=True)
class Tally:
    """The exactly-once check of a set of job numbers."""

    expected: int
    runs: int
    """Handler runs recorded for the expected numbers (duplicates included)."""
    lost: int
    """Expected numbers never run."""
    duplicates: int
    """Runs beyond the first of a number."""


def tally(records: Iterable[Record], expected: Collection[int]) -> Tally:
    """Counts lost and duplicated runs of the numbers ``expected``."""
    runs = Counter(record.n for record in records if record.n in expected)
    return Tally(
        expected=len(expected),
        runs=sum(runs.values()),
        lost=len(expected) - len(runs),
        duplicates=sum(count - 1 for count in runs.values()),
    )


def ready_pids(folder: Path) -> set[int]:
    """The worker processes that wrote their ready marker (connected to the coordinator)."""
    return {int(path.name[len(READY_PREFIX) :]) for path in folder.glob(f"{READY_PREFIX}*")}
