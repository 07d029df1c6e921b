"""``runwick bench``: no-op jobs end to end, measured from the producer and the handlers.

By default it starts everything on this machine: a scratch database (a SQLite file, or
with ``--engine postgres`` a fresh database on ``--database-url``'s server, dropped
afterwards), ``runwick serve`` on a free loopback port, and ``--workers`` bench worker
processes (``coordinator.cli.bench.worker``). With ``--target`` it measures an existing
deployment instead: it starts only the workers (none with ``--no-workers``) and cannot
see the coordinator's or the database's processes.

Modules: ``phases`` (what a run does, in order), ``sink`` (what handlers record),
``stats`` (percentiles), ``procfs`` and ``usage`` (CPU and memory from /proc),
``deployment`` (the processes and the scratch database), ``report`` (JSON and text).
The figures and the JSON shape are described in ``benchmarks/README.md``.

Exit codes: 0 every job ran exactly once and succeeded; 1 a job was lost, ran twice or
did not succeed, the run stalled, or the coordinator could not be started or reached;
2 bad flags.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.cli.bench import stopping
from worker_sdk import ConnectionOptions, RunwickError, Unauthenticated

if TYPE_CHECKING:
    from coordinator.cli.bench.phases import Plan

ENGINES = ("sqlite", "postgres")
READY_TIMEOUT_S = 60.0

_EPILOG = """\
phases, in order: warm-up jobs; the latency phase (--latency-jobs enqueued one by one at
--rate per second into the idle workers: enqueue-to-start percentiles); the queue is
paused; --backlog jobs are loaded; --jobs measured jobs are enqueued in batches of
--batch (enqueue throughput); the queue is resumed and the workers run them (processing
throughput from the first handler start to the last completion, and CPU seconds per job
of each process, read from /proc); then every job's runs and state are checked.

The backlog is honest: it sits in the measured jobs' own queue, under the same job type,
due now (available), one priority step below them (-1). Every claim must therefore find
the measured jobs ahead of the whole backlog, which only an index in claim order does
cheaply; a claim that scans or sorts the queue pays for every backlog job. When the
measured jobs run out the workers start on the backlog (reported as backlog.ran); with
--target those jobs stay in the deployment's queue.

Every figure comes from the bench host's clock (the producer just before each enqueue
call, the handler when called), never from the coordinator's tables, so a local run and
a --target run report the same figures the same way. Exit status 1 when a job was lost,
ran twice or did not end succeeded.
"""


class UsageError(Exception):
    """A flag is wrong; nothing was started."""


def add_bench_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser(
        "bench",
        help="measure throughput, latency, CPU per job and exactly-once delivery of no-op jobs",
        description="Measures no-op jobs end to end: enqueue and processing throughput, "
        "enqueue-to-start latency, CPU seconds per job per process, peak memory, and a "
        "check that every job ran to success exactly once.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = bench.add_argument
    add("--jobs", type=int, default=5_000, help="measured jobs of the throughput phase (default 5000)")
    add(
        "--batch",
        type=int,
        default=500,
        help="jobs per enqueue call (default 500, the coordinator's default maximum)",
    )
    add("--workers", type=int, default=2, help="worker processes to start (default 2)")
    add("--concurrency", type=int, default=64, help="handlers at once per worker process (default 64)")
    add("--latency-jobs", type=int, default=200, help="jobs of the latency phase (default 200; 0 skips it)")
    add("--rate", type=float, default=100.0, help="jobs per second of the latency phase (default 100)")
    add("--backlog", type=int, default=0, help="jobs to pre-load below the measured ones (default 0)")
    add(
        "--overlap",
        action="store_true",
        help="enqueue the measured jobs while the workers process them, instead of before",
    )
    add("--warmup", type=int, default=4, help="warm-up jobs before measuring (default 4)")
    add(
        "--keys",
        type=int,
        default=0,
        help="spread the measured and backlog jobs over N concurrency keys (default 0: no keys)",
    )
    add("--key-limit", type=int, help="the queue's per-key running limit while measuring (default none)")
    add(
        "--queue-rate",
        help="COUNT/PERIOD (like 100000/1s): a rate limit set on the queue after the warm-up",
    )
    add("--settle", type=float, default=1.0, help="seconds to wait for duplicate runs after the last job")
    add("--stall-timeout", type=float, default=60.0, help="give up after this many seconds without progress")
    add("--engine", choices=ENGINES, help="local database: sqlite (default) or postgres")
    add(
        "--database-url",
        help="--engine postgres: the server to make a scratch database on (dropped afterwards); "
        "default postgresql://postgres@127.0.0.1:5432/postgres",
    )
    add(
        "--processes",
        help="coordinator processes to start (runwick serve --processes: N, or auto); "
        "default serve's own [RUNWICK_PROCESSES]",
    )
    add("--work-dir", help="folder for the SQLite file, logs and records (kept); default a temporary one")
    add("--queue", help="queue of the bench's jobs; default runwick-bench-<random>")
    add("--target", help="HOST:PORT of an existing coordinator to measure, instead of starting one")
    add(
        "--token",
        help="--target: bearer token with the enqueue, read, manage and work scopes [RUNWICK_TOKEN]",
    )
    add("--ca", help="--target: PEM CA file, speak TLS [RUNWICK_CA]")
    add(
        "--cert",
        help="--target: PEM client certificate [RUNWICK_CERT]",
    )
    add("--key", help="--target: PEM key of --cert [RUNWICK_KEY]")
    add(
        "--tls",
        action="store_true",
        default=None,
        help="--target: speak TLS trusting the system's CAs [RUNWICK_TLS=1]",
    )
    add(
        "--no-workers",
        action="store_true",
        help="--target: start no workers; bench workers you run write to --sink "
        "(python -m coordinator.cli.bench.worker --sink DIR --queue QUEUE --target ...)",
    )
    add("--sink", help="--no-workers: the folder your bench workers write their records to")
    add("--json", action="store_true", help="print one JSON object for scripts")


def _check(options: argparse.Namespace) -> None:
    """Raises UsageError for flags that cannot work together or are out of range."""
    positive = {"--jobs": options.jobs, "--batch": options.batch, "--concurrency": options.concurrency}
    positive["--warmup"] = options.warmup
    for flag, value in positive.items():
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if options.key_limit is not None and options.key_limit < 1:
        raise UsageError(f"--key-limit must be at least 1, got {options.key_limit}")
    for flag, value in (
        ("--latency-jobs", options.latency_jobs),
        ("--backlog", options.backlog),
        ("--keys", options.keys),
    ):
        if value < 0:
            raise UsageError(f"{flag} must be 0 or more, got {value}")
    if options.workers < 1 and not options.no_workers:
        raise UsageError(f"--workers must be at least 1, got {options.workers}")
    if not options.rate > 0:
        raise UsageError(f"--rate must be above 0, got {options.rate}")
    if options.queue_rate is not None:
        options.queue_rate = _queue_rate(options.queue_rate)
    if options.settle < 0 or not options.stall_timeout > 0:
        raise UsageError("--settle must be 0 or more and --stall-timeout above 0")
    if options.target is None:
        if options.no_workers or options.sink:
            raise UsageError("--no-workers and --sink need --target (a deployment whose workers you run)")
        remote_only = {"--token": options.token, "--ca": options.ca, "--cert": options.cert}
        remote_only |= {"--key": options.key, "--tls": options.tls}
        given = [flag for flag, value in remote_only.items() if value]
        if given:
            raise UsageError(
                f"{', '.join(given)} need --target (the local coordinator speaks plaintext, without tokens)"
            )
        engine = options.engine or _engine_of(options.database_url)
        if options.processes is not None:
            from coordinator.cli.replicas import parse_processes

            try:
                count = parse_processes(options.processes)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if engine == "sqlite" and count is not None and count > 1:
                raise UsageError("--processes over 1 needs --engine postgres: SQLite has a single writer")
        if engine == "sqlite" and options.database_url:
            raise UsageError(
                "--database-url names a PostgreSQL server; the SQLite database is always a fresh file "
                "(choose its folder with --work-dir)"
            )
        options.engine = engine
    else:
        env = os.environ.get
        options.token = options.token or env("RUNWICK_TOKEN")
        options.ca, options.cert = options.ca or env("RUNWICK_CA"), options.cert or env("RUNWICK_CERT")
        options.key = options.key or env("RUNWICK_KEY")
        if options.tls is None:
            options.tls = env("RUNWICK_TLS", "") not in ("", "0", "false")
        if options.engine or options.database_url or options.processes:
            raise UsageError(
                "--engine, --database-url and --processes set up a local coordinator; "
                "--target measures a deployment"
            )
        if options.no_workers and not (options.sink and options.queue):
            raise UsageError(
                "--no-workers needs --sink and --queue: the folder and queue your bench workers use"
            )
        if options.sink and not Path(options.sink).is_dir():
            raise UsageError(f"--sink {options.sink} is not a folder")


def _engine_of(url: str | None) -> str:
    return "postgres" if url and url.startswith("postgres") else "sqlite"


@contextmanager
def _work_dir(given: str | None) -> Iterator[Path]:
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    folder = Path(tempfile.mkdtemp(prefix="runwick-bench-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_bench(options: argparse.Namespace) -> int:
    """Runs the bench the flags describe and prints its report."""
    try:
        _check(options)
    except UsageError as exc:
        print(f"runwick bench: {exc}", file=sys.stderr)
        return 2
    from coordinator.cli.bench.deployment import BenchSetupError
    from coordinator.cli.connect import failure

    stopping.install()  # SIGTERM stops what the bench started, as Ctrl-C does
    with _work_dir(options.work_dir) as folder:
        try:
            report = _run(options, folder)
        except UsageError as exc:
            print(f"runwick bench: {exc}", file=sys.stderr)
            return 2
        except BenchSetupError as exc:
            print(f"runwick bench: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("runwick bench: interrupted; what it started is stopped", file=sys.stderr)
            return 130
        except RunwickError as exc:
            print(f"runwick bench: {failure(exc)}", file=sys.stderr)
            if isinstance(exc, Unauthenticated) and not options.token:
                print("runwick bench: pass a token with --token or RUNWICK_TOKEN", file=sys.stderr)
            return 1
    if options.json:
        print(json.dumps(report))
    else:
        from coordinator.cli.bench.report import render_text

        print(render_text(report))
    return 0 if report["ok"] else 1


def _wait_ready(workers: list[subprocess.Popen[bytes]], sink: Path, logs: Path) -> None:
    from coordinator.cli.bench.deployment import BenchSetupError
    from coordinator.cli.bench.sink import ready_pids

    deadline = time.monotonic() + READY_TIMEOUT_S
    pids = {worker.pid for worker in workers}
    while not pids <= ready_pids(sink):
        if any(worker.poll() is not None for worker in workers):
            raise BenchSetupError(f"a bench worker exited before connecting:\n{_log_tail(logs)}")
        if time.monotonic() > deadline:
            raise BenchSetupError(
                f"bench workers did not connect within {READY_TIMEOUT_S:g} s:\n{_log_tail(logs)}"
            )
        stopping.pause(0.05)


def _log_tail(logs: Path, lines: int = 8) -> str:
    """The last lines of the first worker's log (the work folder may be removed next)."""
    try:
        return "\n".join((logs / "worker-0.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no worker log)"


def _plan(options: argparse.Namespace) -> Plan:
    from coordinator.cli.bench.phases import Plan

    return Plan(
        jobs=options.jobs,
        batch=options.batch,
        latency_jobs=options.latency_jobs,
        rate=options.rate,
        backlog=options.backlog,
        overlap=options.overlap,
        warmup=options.warmup,
        queue=options.queue or f"runwick-bench-{secrets.token_hex(4)}",
        settle_s=options.settle,
        stall_timeout_s=options.stall_timeout,
        keys=options.keys,
        key_limit=options.key_limit,
        queue_rate=options.queue_rate,
    )


def _queue_rate(text: str) -> tuple[int, int]:
    from coordinator.domain.rates import RateError, parse_rate

    try:
        return parse_rate(text)
    except RateError as error:
        raise UsageError(f"--queue-rate: {error}") from None


def _run(options: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from coordinator.cli.bench import deployment, report, usage
    from coordinator.cli.bench.phases import Phases, Probe, client_for
    from coordinator.cli.bench.sink import SinkReader
    from coordinator.cli.connect import connection_options

    plan = _plan(options)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    database: deployment.ScratchDatabase | None = None
    coordinator: deployment.Coordinator | None = None
    workers: list[subprocess.Popen[bytes]] = []
    stack = ExitStack()
    try:
        if options.target is None:
            database = deployment.ScratchDatabase.create(options.engine, options.database_url, folder)
            coordinator = deployment.start_coordinator(
                database.url, folder / "coordinator.log", processes=options.processes
            )
            target = coordinator.target
            connection = ConnectionOptions(target)
            worker_env = {"RUNWICK_TARGET": target}
        else:
            target = options.target
            try:
                connection = connection_options(options)
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
            worker_env = deployment.connection_env(options, target)
        client = stack.enter_context(client_for(connection))
        client.list_queues_page(page_size=1)  # fails now, before any worker starts, on a bad target or token
        sink_dir = Path(options.sink) if options.no_workers else folder / "sink"
        if not options.no_workers:
            shutil.rmtree(sink_dir, ignore_errors=True)  # an earlier run's, kept in --work-dir
        sink_dir.mkdir(exist_ok=True)
        reader = SinkReader(sink_dir)
        reader.skip_existing()
        if not options.no_workers:
            workers = deployment.start_workers(
                options.workers,
                sink=sink_dir,
                queue=plan.queue,
                concurrency=options.concurrency,
                env=worker_env,
                logs=folder,
            )
            _wait_ready(workers, sink_dir, folder)
        database_cpu, backends, postmaster = _database_processes(database)
        probe = usage.UsageProbe(
            coordinator.pid if coordinator else None,
            [worker.pid for worker in workers],
            database=backends,
            database_server=postmaster,
        )
        worker_peaks: list[int | None] = []

        def stop_workers() -> None:
            worker_peaks[:] = usage.peak_memory_kb([worker.pid for worker in workers])
            deployment.stop_processes(workers)

        measured = Phases(plan, connection, reader).run(client, Probe(probe.start, probe.end), stop_workers)
        window, cpu_s, busy = probe.cpu_seconds()
        coordinator_peak = usage.peak_memory_kb([coordinator.pid])[0] if coordinator else None
        setup = report.Setup(
            mode="local" if coordinator else "target",
            engine=database.engine if database else None,
            database=database.name if database else None,
            target=target,
            workers=None if options.no_workers else options.workers,
            concurrency=None if options.no_workers else options.concurrency,
            cpu_cores=os.cpu_count(),
            loadavg_1m_before=load,
            database_cpu=database_cpu,
            processes=options.processes,
        )
        return report.build(
            plan, setup, measured, report.Usage(window, cpu_s, busy, coordinator_peak, worker_peaks)
        )
    finally:
        stack.close()
        deployment.stop_processes(workers)
        if coordinator is not None:
            deployment.stop_processes([coordinator.process])
        if database is not None:
            database.drop()


def _database_processes(
    database: Any,
) -> tuple[str, Callable[[], set[int]] | None, int | None]:
    """What ``database`` CPU counts, the backends' pids and the postmaster's pid."""
    if database is None:
        return "not measured: --target's database is not visible from the bench", None, None
    if database.engine == "sqlite":
        return "not separate: SQLite runs inside the coordinator process", None, None
    if not database.local_postgres:
        return "not measured: the PostgreSQL server is on another host", None, None
    postmaster = database.postmaster_pid()
    if postmaster is None:
        return "not measured: the PostgreSQL server's processes are not visible here", None, None
    return (
        "database: the server processes of the scratch database's connections (the coordinator's); "
        "database_server: every process of the PostgreSQL server, shared with anyone else using it",
        database.backend_pids,
        postmaster,
    )
