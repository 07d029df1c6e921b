"""A FastAPI service with a Runwick worker in its lifespan.

FastAPI runs an event loop, so the worker shares it: ``async with worker`` in the
lifespan starts it with the app and drains it (R-12) when the server shuts down
(uvicorn's SIGTERM or Ctrl-C). Run it from this folder:

    RUNWICK_TARGET=127.0.0.1:7233 RUNWICK_TOKEN=rwk_... uvicorn app:app

``POST /thumbnails/{image}`` enqueues a job; the same process's worker runs it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from fastapi import FastAPI

from worker_sdk import AsyncClient, JobContext, Worker, job

TARGET = os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233")
TOKEN = os.environ.get("RUNWICK_TOKEN")  # needs the work and enqueue scopes


@job("examples.fastapi.thumbnail", max_executions=5)
@dataclass
class Thumbnail:
    image: str


worker = Worker(TARGET, token=TOKEN, concurrency=4, drain_timeout=timedelta(seconds=20))


@worker.handler(Thumbnail)
async def thumbnail(payload: Thumbnail, ctx: JobContext) -> bytes:
    return f"thumbnail of {payload.image} made by process {os.getpid()}".encode()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with worker, AsyncClient(TARGET, token=TOKEN) as client:
        app.state.runwick = client
        yield  # the app serves; leaving drains the worker, then closes the client


app = FastAPI(lifespan=lifespan)


@app.post("/thumbnails/{image}")
async def request_thumbnail(image: str) -> dict[str, str]:
    job_id = await app.state.runwick.enqueue(Thumbnail(image))
    return {"job_id": job_id}
