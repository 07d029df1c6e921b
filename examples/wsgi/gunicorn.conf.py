"""gunicorn settings for app.py: the Runwick worker starts in each worker process after
the fork and drains before that process exits.

gunicorn's graceful_timeout must leave room for the worker's drain_timeout (20 s in
app.py): on SIGTERM gunicorn waits that long for its workers before killing them.
"""

from __future__ import annotations

from typing import Any

workers = 2
graceful_timeout = 40
preload_app = True  # safe: app.py only declares the worker; it starts after the fork


def post_worker_init(worker: Any) -> None:
    """In the forked worker process: start the Runwick worker on its own thread."""
    import app

    worker.runwick = app.worker.start_in_background()
    worker.log.info("runwick worker %s started in pid %s", app.worker.worker_id, worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    """The worker process is exiting (SIGTERM, max_requests, ...): drain first."""
    handle = getattr(worker, "runwick", None)
    if handle is not None:
        stopped = handle.stop()
        worker.log.info("runwick worker drained in pid %s: %s", worker.pid, stopped)
