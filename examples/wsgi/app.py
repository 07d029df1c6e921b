"""A plain WSGI application (no event loop) with a Runwick worker on a thread of its
own in every gunicorn worker process.

The worker is declared here, but started only after gunicorn forks, in each worker
process (``gunicorn.conf.py``'s ``post_worker_init``), and drained when that process
exits (``worker_exit``, and the interpreter's exit as a backstop). Run it from this
folder:

    RUNWICK_TARGET=127.0.0.1:7233 RUNWICK_TOKEN=rwk_... gunicorn -c gunicorn.conf.py app:application

``POST /resize?image=NAME`` enqueues a job; whichever process's worker claims it runs it.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs

from worker_sdk import Client, JobContext, Worker, job

TARGET = os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233")
TOKEN = os.environ.get("RUNWICK_TOKEN")  # needs the work and enqueue scopes


@job("examples.wsgi.resize")
@dataclass
class Resize:
    image: str


# Declaring the worker makes no thread and no connection: safe to import before the
# fork (gunicorn --preload). start_in_background() is what must wait until after it.
worker = Worker(TARGET, token=TOKEN, concurrency=2, drain_timeout=timedelta(seconds=20))


@worker.handler(Resize)
def resize(payload: Resize, ctx: JobContext) -> bytes:  # sync: runs on the worker's pool
    return f"resized {payload.image} in process {os.getpid()}".encode()


@functools.cache
def client() -> Client:
    """One client per process, made on first use (after the fork, like the worker)."""
    return Client(TARGET, token=TOKEN)


def application(environ: dict[str, object], start_response):  # type: ignore[no-untyped-def]
    if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") == "/resize":
        image = parse_qs(str(environ.get("QUERY_STRING", ""))).get("image", ["unnamed"])[0]
        body = json.dumps({"job_id": client().enqueue(Resize(image)), "pid": os.getpid()}).encode()
        start_response("202 Accepted", [("Content-Type", "application/json")])
        return [body]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"POST /resize?image=NAME\n"]
