"""The worker process of ``runwick bench``: one no-op job type that records each run.

Run as ``python -m coordinator.cli.bench.worker --sink DIR --queue QUEUE --concurrency N``
with the connection flags of the client commands (``--target``, ``--token``, TLS; each
also from its ``RUNWICK_*`` variable, which is how ``runwick bench`` passes them, so a
token never shows in the process list). Start it by hand on the bench host with
``runwick bench --target ... --no-workers --sink DIR`` to measure workers you run.

The handler records one sink line per run (``sink.Record``) and returns: the job is a
no-op, so what is measured is the system around it. Once its stream is open and
welcomed the process writes ``ready-<pid>`` into the sink folder, so the bench knows
every worker is connected before it measures. SIGTERM or SIGINT drains and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.cli.bench.sink import READY_PREFIX, Record, SinkWriter
from coordinator.cli.connect import add_connection_flags, connection_options
from coordinator.cli.heap import freeze_start_up_heap
from worker_sdk import JobContext, Worker, job

WIRE_NAME = "runwick.bench.noop"
READY_POLL_S = 0.01


@job(WIRE_NAME)
@dataclass
class Noop:
    """A bench job: its number (``sink``'s numbering) and the producer's clock at enqueue."""

    n: int
    t: float


def build_worker(options: argparse.Namespace, sink: SinkWriter) -> Worker:
    worker = Worker(connection_options(options), queues=[options.queue], concurrency=options.concurrency)
    pid = os.getpid()

    @worker.handler(Noop)
    async def noop(payload: Noop, ctx: JobContext) -> None:
        started = time.time()
        sink.write(Record(payload.n, payload.t, started, time.time(), pid))

    return worker


async def serve(options: argparse.Namespace) -> None:
    folder = Path(options.sink)
    sink = SinkWriter(folder)
    worker = build_worker(options, sink)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await worker.start()
    try:
        while not worker.connected and not stop.is_set():  # noqa: ASYNC110 (the SDK has no event for it)
            await asyncio.sleep(READY_POLL_S)
        (folder / f"{READY_PREFIX}{os.getpid()}").touch()
        await stop.wait()
    finally:
        await worker.stop()
        sink.close()


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m coordinator.cli.bench.worker")
    parser.add_argument("--sink", required=True, help="folder the run records go to")
    parser.add_argument("--queue", required=True, help="queue to take bench jobs from")
    parser.add_argument("--concurrency", type=int, default=64, help="handlers at once")
    add_connection_flags(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    options = parse(argv)
    if not Path(options.sink).is_dir():
        print(f"runwick bench worker: --sink {options.sink} is not a folder", file=sys.stderr)
        return 2
    freeze_start_up_heap()  # as ``runwick worker`` does, so the bench measures that
    try:
        asyncio.run(serve(options))
    except ValueError as exc:  # connection flags or concurrency out of range
        print(f"runwick bench worker: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
