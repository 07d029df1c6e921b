"""Helpers every test suite here shares: one copy each.

``polling``: wait until a condition holds, failing with what was awaited.
``processes``: start ``runwick serve``/``runwick worker`` and other programs, wait for
their lines, stop or kill -9 them, probe their health ports.
"""

from tests.support.polling import eventually, eventually_async, wait_until
from tests.support.processes import (
    LISTENING,
    ROOT,
    UVICORN_LISTENING,
    WorkerProcess,
    free_port,
    health_status,
    kill9,
    read_log,
    reap,
    runwick_command,
    serve,
    start_process,
    start_worker,
    stop,
    tool,
    wait_exit,
    wait_for_line,
    wait_listening,
)

__all__ = [
    "LISTENING",
    "ROOT",
    "UVICORN_LISTENING",
    "WorkerProcess",
    "eventually",
    "eventually_async",
    "free_port",
    "health_status",
    "kill9",
    "read_log",
    "reap",
    "runwick_command",
    "serve",
    "start_process",
    "start_worker",
    "stop",
    "tool",
    "wait_exit",
    "wait_for_line",
    "wait_listening",
    "wait_until",
]
