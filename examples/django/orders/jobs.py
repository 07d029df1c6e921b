"""The orders app's job type, its handler and the Runwick worker and client."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import timedelta

from worker_sdk import Client, JobContext, Worker, job

TARGET = os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233")
TOKEN = os.environ.get("RUNWICK_TOKEN")  # needs the work and enqueue scopes


@job("examples.django.send_receipt")
@dataclass
class SendReceipt:
    order_id: str


worker = Worker(TARGET, token=TOKEN, concurrency=4, drain_timeout=timedelta(seconds=20))


@worker.handler(SendReceipt)
def send_receipt(payload: SendReceipt, ctx: JobContext) -> bytes:  # sync, like Django code
    return f"receipt for order {payload.order_id} sent by process {os.getpid()}".encode()


@functools.cache
def client() -> Client:
    """One client per process, made on first use."""
    return Client(TARGET, token=TOKEN)
