"""Where one light-load job's enqueue-to-start goes, hop by hop (LOG.md, 2026-12-07).

Starts a coordinator (``runwick serve``) and ``--workers`` worker processes, enqueues
``--jobs`` no-op jobs one call at a time at ``--rate`` a second, and stamps each hop of
each job with the machine's monotonic clock, which every process on it shares:

- the client's call (here) and the handler's run (in the worker);
- in the coordinator and the workers, the entry and exit of the functions named in
  ``POINTS``, and every statement and commit psycopg runs (PostgreSQL), by a
  ``sitecustomize`` module that this script writes into a scratch folder and puts first
  on the children's ``PYTHONPATH``. It wraps those functions as their modules load.

A job's hops are the stamps between its call and its run. The sequence most jobs show is
printed with each stamp's median, in ms after the call, so two trees can be compared hop
by hop (``--source``: another checkout first on the children's ``PYTHONPATH``, as the
base of an A/B). Points a tree does not have are left out. Each stamp costs about 5 µs,
so the total runs a little above an unprobed run's. Speed is measured here, never asserted.

    PYTHONPATH=. python benchmarks/hops.py
    PYTHONPATH=. python benchmarks/hops.py --database-url postgresql+psycopg://postgres@127.0.0.1/scratch
    PYTHONPATH=. python benchmarks/hops.py --database-url ... --source /tmp/base-checkout
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from coordinator.cli.serve import READY_LINE
from worker_sdk import Client

POINTS = (
    ("coordinator.api.job_servicer", "JobServicer", "Enqueue"),
    ("coordinator.dispatch.dispatcher", "Dispatcher", "_launch"),
    ("coordinator.service.batch", "WorkerOps", "process"),
    ("coordinator.service.enqueue", "", "insert_batch"),
    ("coordinator.dispatch.joined_starts", "JoinedStarts", "hand_out"),
    ("coordinator.dispatch.joined_starts", "JoinedStarts", "gather"),
    ("coordinator.dispatch.sessions", "WorkerSession", "start"),
    ("coordinator.dispatch.sessions", "WorkerSession", "deliver"),
    ("coordinator.api.protocol", "", "frame_batched"),
    ("worker_sdk._engine", "Engine", "on_message"),
    ("worker_sdk._engine", "Engine", "_execute"),
)
"""(module, class or "" for a module function, function): stamped at entry (``>``) and
exit (``<``). A generator function is stamped when called; a coroutine function when
its coroutine starts and ends."""

_PROBE = """
import atexit, functools, importlib.abc, importlib.util, inspect, os, sys, threading, time

POINTS = {points!r}
_stamps = []
_out = open(os.path.join(os.environ["RUNWICK_HOPS_DIR"], "stamps-%d.txt" % os.getpid()), "w")


def stamp(name):
    thread = threading.current_thread().name[:16].replace(" ", "_")
    _stamps.append("%.6f %s %s\\n" % (time.perf_counter() * 1000, thread, name))
    if len(_stamps) >= 512:
        _flush()


def _flush():
    _out.writelines(_stamps)
    _out.flush()
    _stamps.clear()


atexit.register(_flush)


def _wrap(function, name):
    if inspect.iscoroutinefunction(function):
        async def wrapped(*args, **kwargs):
            stamp(name + ">")
            try:
                return await function(*args, **kwargs)
            finally:
                stamp(name + "<")
    else:
        def wrapped(*args, **kwargs):
            stamp(name + ">")
            try:
                return function(*args, **kwargs)
            finally:
                stamp(name + "<")
    return functools.wraps(function)(wrapped)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        wanted = [(owner, name) for module, owner, name in POINTS if module == fullname]
        if not wanted:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            for owner, name in wanted:
                holder = getattr(module, owner, None) if owner else module
                function = getattr(holder, name, None) if holder is not None else None
                if function is not None:
                    setattr(holder, name, _wrap(function, name))

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
try:
    import psycopg
except ImportError:
    psycopg = None
if psycopg is not None:
    _execute, _commit = psycopg.Cursor.execute, psycopg.Connection.commit

    def execute(self, query, *args, **kwargs):
        name = "sql " + " ".join(str(query).split())[:28]
        stamp(name + ">")
        try:
            return _execute(self, query, *args, **kwargs)
        finally:
            stamp(name + "<")

    def commit(self):
        stamp("COMMIT>")
        try:
            return _commit(self)
        finally:
            stamp("COMMIT<")

    psycopg.Cursor.execute, psycopg.Connection.commit = execute, commit
"""

_JOB = """
from dataclasses import dataclass
from worker_sdk import job


@job("hops.noop")
@dataclass
class Noop:
    i: int
"""

_APP = """
import os, time
from hops_job import Noop
from worker_sdk import JobContext, Worker

_runs = open(os.path.join(os.environ["RUNWICK_HOPS_DIR"], "runs-%d.txt" % os.getpid()), "a", buffering=1)
worker = Worker(os.environ["RUNWICK_TARGET"], concurrency=int(os.environ["RUNWICK_HOPS_CONCURRENCY"]))


@worker.handler(Noop)
async def noop(payload: Noop, ctx: JobContext) -> None:
    _runs.write("%d %.6f\\n" % (payload.i, time.perf_counter() * 1000))
"""

WARM_UP = 4


def main() -> None:
    args = _arguments()
    scratch = Path(tempfile.mkdtemp(prefix="runwick-hops-"))
    try:
        calls, runs, stamps = _measure(args, scratch)
    except BaseException:
        log = scratch / "coordinator.log"
        if log.exists():  # what the coordinator said, before its folder goes
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(report(calls, runs, stamps))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="a scratch database (default: a new SQLite file)")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=100.0, help="enqueue calls a second")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=128, help="handlers at once a worker")
    parser.add_argument("--source", help="a checkout to run the coordinator and workers from")
    args = parser.parse_args()
    if args.jobs < 1 or args.rate <= 0 or args.workers < 1 or args.concurrency < 1:
        parser.error("--jobs, --rate, --workers and --concurrency must be positive")
    return args


def _measure(
    args: argparse.Namespace, scratch: Path
) -> tuple[dict[int, float], dict[int, float], list[tuple[float, str, str]]]:
    (scratch / "sitecustomize.py").write_text(_PROBE.format(points=POINTS))
    (scratch / "hops_job.py").write_text(_JOB)
    (scratch / "hops_app.py").write_text(_APP)
    path = [str(scratch), *([args.source] if args.source else []), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "RUNWICK_HOPS_DIR": str(scratch),
        "RUNWICK_HOPS_CONCURRENCY": str(args.concurrency),
    }
    url = args.database_url or f"sqlite:///{scratch / 'hops.db'}"
    runwick = [sys.executable, "-m", "coordinator.cli"]  # run in ``scratch``: -m puts the cwd first
    subprocess.run(
        [*runwick, "migrate", "--database-url", url],
        env=env,
        cwd=scratch,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    children: list[subprocess.Popen[bytes]] = []
    try:
        coordinator, target = _serve(runwick, url, env, scratch)
        children.append(coordinator)
        env["RUNWICK_TARGET"] = target
        for number in range(args.workers):
            with open(scratch / f"worker-{number}.log", "wb") as log:
                children.append(
                    subprocess.Popen(
                        [*runwick, "worker", "hops_app:worker"], env=env, cwd=scratch, stdout=log, stderr=log
                    )
                )
        calls = _enqueue(target, args.jobs, args.rate, scratch)
    finally:
        for child in reversed(children):  # the workers first, then the coordinator
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return calls, _read_runs(scratch), _read_stamps(scratch)


def _serve(
    runwick: list[str], url: str, env: dict[str, str], scratch: Path
) -> tuple[subprocess.Popen[bytes], str]:
    log_path = scratch / "coordinator.log"
    argv = [*runwick, "serve", "--database-url", url, "--host", "127.0.0.1", "--port", "0", "--insecure"]
    # Every side port off (the scaler's is off by default): runs never collide on one.
    argv += ["--health-port", "-1", "--metrics-port", "-1", "--dashboard-port", "-1"]
    argv += ["--log-level", "WARNING"]
    with open(log_path, "wb") as log:
        coordinator = subprocess.Popen(argv, env=env, cwd=scratch, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and coordinator.poll() is None:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith(READY_LINE):
                return coordinator, line[len(READY_LINE) :].strip()
        time.sleep(0.05)
    coordinator.kill()
    raise SystemExit(f"the coordinator did not start:\n{log_path.read_text(errors='replace')}")


def _enqueue(target: str, jobs: int, rate: float, scratch: Path) -> dict[int, float]:
    """Each job's call time, after a warm-up that every worker has run."""
    sys.path.insert(0, str(scratch))
    from hops_job import Noop  # type: ignore[import-not-found]  # written by _measure

    client = Client(target)
    try:
        for number in range(-WARM_UP, 0):
            client.enqueue(Noop(number))
        deadline = time.monotonic() + 60
        while len(_read_runs(scratch)) < WARM_UP and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the claim rounds after the warm-up settle
        calls: dict[int, float] = {}
        began = time.perf_counter()
        for number in range(jobs):
            due = began + number / rate
            while time.perf_counter() < due:
                time.sleep(0.0002)
            calls[number] = time.perf_counter() * 1000
            client.enqueue(Noop(number))
        deadline = time.monotonic() + 60
        while len(_read_runs(scratch)) < WARM_UP + jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        return calls
    finally:
        client.close()


def _read_runs(scratch: Path) -> dict[int, float]:
    runs: dict[int, float] = {}
    for path in scratch.glob("runs-*.txt"):
        for line in path.read_text().splitlines():
            number, at = line.split()
            runs[int(number)] = float(at)
    return runs


def _read_stamps(scratch: Path) -> list[tuple[float, str, str]]:
    stamps = []
    for path in scratch.glob("stamps-*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split(None, 2)
            if len(parts) == 3:
                stamps.append((float(parts[0]), parts[1], parts[2]))
    return sorted(stamps)


def report(calls: dict[int, float], runs: dict[int, float], stamps: list[tuple[float, str, str]]) -> str:
    """The median enqueue-to-start, then the hop sequence most jobs show, each stamp with
    its thread and its median in ms after the call."""
    times = [at for at, _, _ in stamps]
    hops: dict[int, list[tuple[float, str, str]]] = {}
    for number, called in calls.items():
        ran = runs.get(number)
        if ran is None:
            continue
        first = bisect.bisect_left(times, called)
        last = bisect.bisect_right(times, ran)
        hops[number] = [(at - called, thread, name) for at, thread, name in stamps[first:last]]
    if not hops:
        return "no job ran"
    latencies = [runs[number] - calls[number] for number in hops]
    names = {number: tuple(name for _, _, name in sequence) for number, sequence in hops.items()}
    shape, count = Counter(names.values()).most_common(1)[0]
    alike = [number for number in hops if names[number] == shape]
    p90 = statistics.quantiles(latencies, n=10)[-1] if len(latencies) > 1 else latencies[0]
    lines = [
        f"{len(hops)} of {len(calls)} jobs ran; enqueue-to-start p50 {statistics.median(latencies):.3f} ms, "
        f"p90 {p90:.3f} ms",
        f"the hop sequence of {count} of them, each stamp's median in ms after the call:",
    ]
    for index, name in enumerate(shape):
        median = statistics.median(hops[number][index][0] for number in alike)
        lines.append(f"  {median:8.3f}  {hops[alike[0]][index][1]:<16}  {name}")
    median_run = statistics.median(runs[number] - calls[number] for number in alike)
    lines.append(f"  {median_run:8.3f}  {'':<16}  the handler runs")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
