"""A FastAPI service with a Runwick worker in its lifespan.

FastAPI runs an event loop, so the worker shares it: ``async with worker`` in the
lifespan starts it with the app and drains it (R-12) when the server shuts down
(uvicorn's SIGTERM or Ctrl-C). Run it from this folder:

    RUNWICK_TARGET=127.0.0.1:7233 RUNWICK_TOKEN=rwk_... uvicorn app:app

``POST /thumbnails/{image}`` enqueues a job; the same process's worker runs it.

``POST /orders/{order_id}`` enqueues transactionally (docs/outbox.md): the order row and
its receipt job are written in one transaction of the app's own database
(``APP_DATABASE_URL``, default ``sqlite:///shop.db``), and an ``OutboxRelay`` in the
lifespan forwards the committed job to the coordinator.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from fastapi import FastAPI
from sqlalchemy import Column, MetaData, String, Table, create_engine, insert

from worker_sdk import AsyncClient, JobContext, Worker, job
from worker_sdk.outbox import Outbox, OutboxRelay, RelayConfig

TARGET = os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233")
TOKEN = os.environ.get("RUNWICK_TOKEN")  # needs the work and enqueue scopes


@job("examples.fastapi.thumbnail", max_executions=5)
@dataclass
class Thumbnail:
    image: str


@job("examples.fastapi.receipt")
@dataclass
class Receipt:
    order_id: str


worker = Worker(TARGET, token=TOKEN, concurrency=4, drain_timeout=timedelta(seconds=20))

metadata = MetaData()
orders = Table("orders", metadata, Column("id", String(64), primary_key=True))
outbox = Outbox(metadata=metadata)  # the runwick_outbox table, next to the app's own
engine = create_engine(os.environ.get("APP_DATABASE_URL", "sqlite:///shop.db"))
relay = OutboxRelay(engine, TARGET, token=TOKEN, config=RelayConfig(poll_interval_s=0.2))


@worker.handler(Thumbnail)
async def thumbnail(payload: Thumbnail, ctx: JobContext) -> bytes:
    return f"thumbnail of {payload.image} made by process {os.getpid()}".encode()


@worker.handler(Receipt)
async def receipt(payload: Receipt, ctx: JobContext) -> bytes:
    return f"receipt for order {payload.order_id}".encode()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    metadata.create_all(engine)  # a real service runs its migrations instead
    async with worker, relay, AsyncClient(TARGET, token=TOKEN) as client:
        app.state.runwick = client
        yield  # the app serves; leaving drains the worker, then closes the client


app = FastAPI(lifespan=lifespan)


@app.post("/thumbnails/{image}")
async def request_thumbnail(image: str) -> dict[str, str]:
    job_id = await app.state.runwick.enqueue(Thumbnail(image))
    return {"job_id": job_id}


@app.post("/orders/{order_id}")
def place_order(order_id: str) -> dict[str, str]:
    """A sync route (FastAPI runs it on a thread): the order and its job commit together."""
    with engine.begin() as conn:
        conn.execute(insert(orders).values(id=order_id))
        key = outbox.enqueue(conn, Receipt(order_id))
    return {"order_id": order_id, "idempotency_key": key}
