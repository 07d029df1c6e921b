"""The chaos workload's job types, shared by the producers (test process) and the
worker app (worker processes). No Worker here: importing this starts nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from worker_sdk import job

# Short delays so a fault-heavy run still ends: retries and unstarted re-queues.
RETRY_DELAY = (timedelta(milliseconds=100), timedelta(milliseconds=800))
UNSTARTED_DELAY = (timedelta(milliseconds=100), timedelta(milliseconds=400))


@job("chaos.task", max_executions=4)
@dataclass
class Task:
    """Sleeps ``sleep_ms`` (cooperatively), then succeeds; raises a retryable error on
    executions up to ``fail_executions``, and fails permanently when ``permanent``."""

    key: str
    sleep_ms: int
    fail_executions: int = 0
    permanent: bool = False


@job("chaos.fragile", max_executions=2, execution_timeout=timedelta(milliseconds=1_200))
@dataclass
class Fragile:
    """Like ``Task`` with a small budget and an execution timeout (R-7): a long sleep
    times out."""

    key: str
    sleep_ms: int
    fail_executions: int = 0
    permanent: bool = False


def output_for(attempt_id: str, key: str) -> bytes:
    """What a successful run returns: the checker matches a job's output to its attempt."""
    return f"{attempt_id}|{key}".encode()


def attempt_of_output(output: bytes | str | None) -> str | None:
    """The attempt ID an output names (None for no or foreign output)."""
    if output is None:
        return None
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    attempt, sep, _ = text.partition("|")
    return attempt if sep else None
