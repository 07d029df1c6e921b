"""The history of a chaos run: every operation as one JSON object per line.

Times: ``wall`` is milliseconds since the epoch (``time.time()``, the clock the
coordinator's timestamps share on this machine), ``mono`` is ``time.monotonic()``
seconds (system-wide on Linux, so comparable across the processes of one run).

A saved history is a JSONL file: a ``header`` line (seed, lease, maintenance interval,
slack...), then the events in the order recorded. Files written by processes that may
be killed can end in a cut line; ``parse_jsonl`` drops such a last line and reports it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]


def encode_event(event: Event) -> bytes:
    """One event as a JSON line."""
    return (json.dumps(event, separators=(",", ":"), sort_keys=True) + "\n").encode()


@dataclass
class Parsed:
    events: list[Event]
    truncated_last_line: bool = False


def parse_jsonl(text: str, *, source: str = "history") -> Parsed:
    """Parses JSON lines; a last line that does not parse (a write cut by kill -9) is
    dropped. A bad line anywhere else is an error.

    Raises:
        ValueError: A line before the last is not a JSON object.
    """
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines.pop()  # the empty string after the final newline
    events: list[Event] = []
    truncated = False
    for number, line in enumerate(lines, 1):
        last = number == len(lines)
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if last:
                truncated = True
                continue
            raise ValueError(f"{source}:{number}: not a JSON line: {line[:120]!r}") from None
        if not isinstance(event, dict):
            if last and not complete:
                truncated = True
                continue
            raise ValueError(f"{source}:{number}: not a JSON object: {line[:120]!r}")
        events.append(event)
    return Parsed(events, truncated)


@dataclass
class History:
    """A run's header and events (the checker's only input)."""

    header: dict[str, Any]
    events: list[Event] = field(default_factory=list)

    def of_kind(self, *kinds: str) -> list[Event]:
        wanted = set(kinds)
        return [event for event in self.events if event.get("kind") in wanted]

    def save(self, path: Path) -> Path:
        with path.open("wb") as out:
            out.write(encode_event({"kind": "header", **self.header}))
            for event in self.events:
                out.write(encode_event(event))
        return path


def load_history(path: Path) -> History:
    """Reads a saved history (tolerating a cut last line).

    Raises:
        ValueError: No header line first, or a bad line before the last.
    """
    parsed = parse_jsonl(path.read_text(errors="replace"), source=str(path))
    if not parsed.events or parsed.events[0].get("kind") != "header":
        raise ValueError(f"{path}: the first line must be the header")
    header = {k: v for k, v in parsed.events[0].items() if k != "kind"}
    return History(header, parsed.events[1:])


class Recorder:
    """Events of the test process (producers, nemesis, observer), thread-safe, also
    streamed to ``live_path`` so a run that dies still leaves what it saw."""

    def __init__(self, live_path: Path | None = None) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []
        self._live = live_path.open("ab") if live_path is not None else None

    def record(self, kind: str, **fields: Any) -> Event:
        event = {"kind": kind, "wall": time.time() * 1000, "mono": time.monotonic(), **fields}
        with self._lock:
            self.events.append(event)
            if self._live is not None:
                self._live.write(encode_event(event))
                self._live.flush()
        return event

    def close(self) -> None:
        with self._lock:
            if self._live is not None:
                self._live.close()
                self._live = None


def merge(header: dict[str, Any], own: Iterable[Event], process_files: Iterable[Path]) -> History:
    """The run's history: the test process's events and every worker process's file,
    in wall-clock order; counts the files that ended in a cut line."""
    events = list(own)
    truncated = 0
    for path in process_files:
        parsed = parse_jsonl(path.read_text(errors="replace"), source=str(path))
        truncated += parsed.truncated_last_line
        events.extend(parsed.events)
    events.sort(key=lambda event: (event.get("wall", 0.0), event.get("mono", 0.0)))
    return History({**header, "truncated_process_files": truncated}, events)
