"""What tracing costs the workers: ``runwick bench``'s processing throughput with the
SDK's spans recorded by a real OpenTelemetry SDK TracerProvider (with a span processor
that drops each span, or ``--processor batch``: a BatchSpanProcessor whose exporter drops
each batch) against tracing off (``RUNWICK_OTEL=off``: the SDK imports no OpenTelemetry).
The variants alternate over one coordinator, so the load of a shared machine falls on
both alike.

    python benchmarks/otel.py                       # SQLite, 3 runs a side
    python benchmarks/otel.py --engine postgres --runs 5 --jobs 20000

Each run starts its own bench worker processes (``coordinator.cli.bench.worker``, the
``runwick bench`` worker, run through this script's ``worker`` command so that the "on"
side installs the TracerProvider first) and measures them with ``runwick bench --target
... --no-workers``. An "on" worker counts the spans it ended; the script fails unless
every measured job made one. It prints each run, each pair's ratio and the ratio of
the medians.

``python benchmarks/otel.py path`` times, in this process and without a coordinator,
the worker's per-run tracing path alone (``worker_sdk._tracing.run_span`` entered around
the run's log context, the outcome, the end) against the same without tracing, and the
SDK's own floor for such a span (``start_span`` with the same attributes, the outcome,
``end``), for a root span, a child of a context of its own, and children sharing one.

Needs the ``otel`` and ``dev`` extras (opentelemetry-api and opentelemetry-sdk).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.cli.bench import deployment
from coordinator.cli.bench.sink import ready_pids

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("off", "on")
SPANS_PREFIX = "spans-"
"""File an "on" worker writes at exit into the sink folder: how many spans it ended."""
READY_TIMEOUT_S = 60.0


def _install_tracer_provider(sink: Path, processor: str) -> None:
    """A real SDK TracerProvider: every span is sampled, recorded and ended, then given to
    a span processor that only counts it (``noop``), or to a BatchSpanProcessor whose
    exporter only counts what it gets (``batch``). The count goes to the sink folder at
    exit."""
    import atexit

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    ended = [0]

    class CountingProcessor(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            ended[0] += 1

    class CountingExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            ended[0] += len(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    if processor == "batch":
        provider.add_span_processor(BatchSpanProcessor(CountingExporter()))
    else:
        provider.add_span_processor(CountingProcessor())
    trace.set_tracer_provider(provider)

    def report() -> None:
        provider.shutdown()  # a batch processor exports what it still holds
        (sink / f"{SPANS_PREFIX}{os.getpid()}").write_text(str(ended[0]))

    atexit.register(report)


def worker_main(argv: Sequence[str]) -> int:
    """``otel.py worker on|off PROCESSOR BENCH-WORKER-ARGS...``: a bench worker, traced or not."""
    from coordinator.cli.bench.worker import main, parse

    variant, processor, rest = argv[0], argv[1], list(argv[2:])
    if variant == "on":
        _install_tracer_provider(Path(parse(rest).sink), processor)
    return main(rest)


def _start_workers(
    variant: str, count: int, sink: Path, queue: str, options: argparse.Namespace
) -> list[subprocess.Popen[bytes]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RUNWICK_")}
    env.update(RUNWICK_TARGET=options.target, PYTHONPATH=str(ROOT))
    if variant == "off":
        env["RUNWICK_OTEL"] = "off"
    args = ["--sink", str(sink), "--queue", queue, "--concurrency", str(options.concurrency)]
    command = [sys.executable, __file__, "worker", variant, options.processor, *args]
    workers = []
    for index in range(count):
        with (sink.parent / f"{sink.name}-worker-{index}.log").open("ab") as log:  # the child keeps its own
            workers.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(ready_pids(sink)) < count:
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
            deployment.stop_processes(workers)
            raise SystemExit(f"the {variant} workers did not get ready; see {sink.parent}")
        time.sleep(0.05)
    return workers


def _cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _one_run(variant: str, index: int, folder: Path, options: argparse.Namespace) -> tuple[float, float]:
    """One run's processing throughput (jobs/s) and its workers' CPU per job (µs)."""
    sink, queue = folder / f"{variant}-{index}", f"otel-bench-{variant}-{index}"
    sink.mkdir()
    workers = _start_workers(variant, options.workers, sink, queue, options)
    try:
        cpu_at_ready = sum(_cpu_seconds(worker.pid) for worker in workers)
        bench = [sys.executable, "-m", "coordinator.cli", "bench", "--target", options.target]
        bench += ["--no-workers", "--sink", str(sink), "--queue", queue, "--json"]
        bench += ["--jobs", str(options.jobs), "--latency-jobs", "0"]
        done = subprocess.run(bench, capture_output=True, text=True, check=False, cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"runwick bench failed ({variant} run {index}):\n{done.stdout}\n{done.stderr}")
        jobs_per_s = float(json.loads(done.stdout)["processing"]["jobs_per_s"])
        # The workers' CPU from their ready marker (start-up, and the import of the SDK on
        # the traced side, left out), over the measured jobs (the few warm-up ones in it).
        cpu_s = sum(_cpu_seconds(worker.pid) for worker in workers) - cpu_at_ready
        cpu_us = cpu_s / options.jobs * 1e6
    finally:
        deployment.stop_processes(workers)
    if variant == "on":
        spans = sum(int(path.read_text()) for path in sink.glob(f"{SPANS_PREFIX}*"))
        if spans < options.jobs:
            raise SystemExit(f"the traced workers ended {spans} spans for {options.jobs} jobs: not traced")
    return jobs_per_s, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--database-url", help="postgres: the server the scratch database is made on")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant, alternating")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--processor",
        choices=("noop", "batch"),
        default="noop",
        help="the traced side's span processor: one that drops each span (default), or a "
        "BatchSpanProcessor with an exporter that drops each batch",
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runwick-otel-bench-") as name:
        folder = Path(name)
        database = deployment.ScratchDatabase.create(options.engine, options.database_url, folder)
        coordinator = deployment.start_coordinator(database.url, folder / "coordinator.log")
        options.target = coordinator.target
        figures: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        cpu: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        try:
            for index in range(options.runs):
                for variant in VARIANTS if index % 2 == 0 else reversed(VARIANTS):
                    jobs_per_s, cpu_us = _one_run(variant, index, folder, options)
                    figures[variant].append(jobs_per_s)
                    cpu[variant].append(cpu_us)
                    print(
                        f"run {index + 1} tracing {variant:3}: {jobs_per_s:,.0f} jobs/s, "
                        f"workers' CPU {cpu_us:,.0f} µs/job",
                        flush=True,
                    )
        finally:
            deployment.stop_processes([coordinator.process])
            database.drop()
    medians = {variant: statistics.median(values) for variant, values in figures.items()}
    pairs = [on / off for on, off in zip(figures["on"], figures["off"], strict=True)]
    print("on/off of each run:", ", ".join(f"{ratio:.2f}" for ratio in pairs))
    print(
        f"{options.engine}, {options.processor} processor, {options.jobs} jobs, "
        f"{options.workers} workers x {options.concurrency}: "
        f"median off {medians['off']:,.0f}, on {medians['on']:,.0f} jobs/s; "
        f"on/off {medians['on'] / medians['off']:.3f}"
    )
    cpu_medians = {variant: statistics.median(values) for variant, values in cpu.items()}
    print(
        f"workers' CPU per job, median: off {cpu_medians['off']:,.0f} µs, on {cpu_medians['on']:,.0f} µs "
        f"(+{cpu_medians['on'] - cpu_medians['off']:,.0f} µs)"
    )


PATH_CASES = ("root", "child", "batch")
"""A job enqueued without a context (a schedule's tick, ``runwick bench``'s), one with a
context of its own, and the jobs of one enqueue call, which share one."""
_TRACEPARENT = "00-{:032x}-{:016x}-01"


def _assignments(case: str, count: int) -> list[tuple[Any, Any]]:
    """``count`` runs of ``case``: each an assignment of its own and the run's context."""
    from worker_sdk._context import JobContext
    from worker_sdk.proto.runwick.v1 import worker_service_pb2 as worker_pb

    runs = []
    for n in range(count):
        assignment = worker_pb.Assignment(
            job_id=f"01900000-0000-7000-8000-{n:012x}",
            attempt_id=f"01900000-0000-7000-9000-{n:012x}",
            wire_name="runwick.bench.noop",
            queue="otel-path",
            execution_number=1,
        )
        if case != "root":
            shared = case == "batch"
            assignment.trace_context.traceparent = _TRACEPARENT.format(0xABC if shared else n + 1, 0xDEF)
        ctx = JobContext(
            job_id=assignment.job_id,
            attempt_id=assignment.attempt_id,
            wire_name=assignment.wire_name,
            queue=assignment.queue,
            execution_number=1,
            max_executions=1,
            generation=1,
        )
        runs.append((assignment, ctx))
    return runs


def _time_runs(runs: Sequence[tuple[Any, Any]], traced: bool) -> float:
    """CPU µs a run of the worker's tracing path (``_engine.Engine._execute``'s calls
    around the pipeline), or of the same without tracing; over ``runs``."""
    from worker_sdk import _tracing
    from worker_sdk._logging import job_log_context
    from worker_sdk._pipeline import RunReport
    from worker_sdk._results import Outcome

    report = RunReport(Outcome.SUCCEEDED)
    load = _tracing._otel
    if not traced:  # what RUNWICK_OTEL=off leaves: run_span returns the span that does nothing
        _tracing._otel = lambda: None  # type: ignore[assignment]
    try:
        started = time.process_time()
        for assignment, ctx in runs:
            with (
                _tracing.run_span(assignment, ctx) as span,
                job_log_context(
                    span.log_fields,
                    job_id=ctx.job_id,
                    attempt_id=ctx.attempt_id,
                    wire_name=ctx.wire_name,
                    queue=ctx.queue,
                ),
            ):
                span.finished(report)
        return (time.process_time() - started) / len(runs) * 1e6
    finally:
        _tracing._otel = load


def _time_sdk_floor(runs: Sequence[tuple[Any, Any]]) -> float:
    """CPU µs of the SDK's own part of a root run span: ``start_span`` with the run's
    eight attributes, the outcome, ``end``; what no code around it can save."""
    from opentelemetry import context, trace

    tracer, root, consumer = trace.get_tracer("otel-path"), context.Context(), trace.SpanKind.CONSUMER
    started = time.process_time()
    for _, ctx in runs:
        attributes = {
            "messaging.system": "runwick",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": ctx.queue,
            "messaging.message.id": ctx.job_id,
            "runwick.attempt_id": ctx.attempt_id,
            "runwick.execution_number": ctx.execution_number,
            "runwick.wire_name": ctx.wire_name,
        }
        span = tracer.start_span("process otel-path", context=root, kind=consumer, attributes=attributes)
        span.set_attribute("runwick.outcome", "succeeded")
        span.end()
    return (time.process_time() - started) / len(runs) * 1e6


def path_main(argv: Sequence[str]) -> int:
    """``otel.py path [--runs N] [--count N]``: the per-run tracing path, in this process."""
    parser = argparse.ArgumentParser(prog="otel.py path", description=path_main.__doc__)
    parser.add_argument("--runs", type=int, default=7, help="rounds of every case, interleaved")
    parser.add_argument("--count", type=int, default=20_000, help="runs timed in each round")
    options = parser.parse_args(argv)
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    from worker_sdk import _tracing

    ended = [0]

    class DroppingProcessor(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            ended[0] += 1

    provider = TracerProvider()
    provider.add_span_processor(DroppingProcessor())
    trace.set_tracer_provider(provider)
    if not _tracing.load():
        raise SystemExit("tracing is off here (RUNWICK_OTEL?): nothing to measure")
    work = {case: _assignments(case, options.count) for case in PATH_CASES}
    timings: dict[str, list[float]] = {}
    for _ in range(options.runs):
        timings.setdefault("off", []).append(_time_runs(work["root"], traced=False))
        for case in PATH_CASES:
            timings.setdefault(case, []).append(_time_runs(work[case], traced=True))
        timings.setdefault("sdk floor", []).append(_time_sdk_floor(work["root"]))
    if ended[0] < options.runs * options.count * (len(PATH_CASES) + 1):
        raise SystemExit(f"only {ended[0]} spans ended: not traced")
    off = statistics.median(timings["off"])
    print(f"{options.runs} rounds of {options.count:,} runs, CPU µs a run (median; min-max):")
    for name, values in timings.items():
        added = "" if name == "off" else f", +{statistics.median(values) - off:.1f} over off"
        print(f"  {name:9}: {statistics.median(values):5.1f} ({min(values):.1f}-{max(values):.1f}){added}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        sys.exit(worker_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "path":
        sys.exit(path_main(sys.argv[2:]))
    main()
