"""The figures of a ``runwick bench`` run: one JSON object (``--json``) or a text table.

The JSON shape (every key is always present; a figure the run could not measure is
``null``) is documented in ``benchmarks/README.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.cli.bench.phases import Measured, Plan
from coordinator.cli.bench.sink import BACKLOG, Record, tally
from coordinator.cli.bench.stats import percentile, rate

OTHER_LOAD_WARNING = 0.10
"""Share of the machine other processes may use in the processing phase without a warning."""
COMPONENTS = ("coordinator", "workers", "database", "database_server", "bench", "other")


@dataclass(frozen=True)
class Setup:
    mode: str
    """``local`` (the bench started the coordinator) or ``target``."""
    engine: str | None
    database: str | None
    """The scratch database's name (PostgreSQL) or file (SQLite); None with ``--target``."""
    target: str
    workers: int | None
    """Worker processes the bench started; None with ``--no-workers``."""
    concurrency: int | None
    cpu_cores: int | None
    loadavg_1m_before: float | None
    database_cpu: str
    """Which processes ``database`` counts (or why it is null)."""
    processes: str | None = None
    """``--processes`` as given (None: ``runwick serve``'s default)."""


@dataclass(frozen=True)
class Usage:
    window_s: float | None
    cpu_s: dict[str, float | None]
    machine_busy_pct: float | None
    coordinator_peak_kb: int | None
    workers_peak_kb: list[int | None]


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _processing(records: Sequence[Record], plan: Plan, measured: Measured) -> dict[str, Any]:
    numbers = plan.throughput_numbers
    runs = [record for record in records if record.n in numbers]
    unique = len({record.n for record in runs})
    span = max(r.ended_at for r in runs) - min(r.started_at for r in runs) if runs else None
    early = 0
    if measured.resumed_at is not None and not plan.overlap:
        early = sum(1 for record in runs if record.started_at < measured.resumed_at)
    return {
        "jobs": unique,
        "seconds": _round(span, 3),
        "jobs_per_s": _round(rate(unique, span) if span is not None else None, 1),
        "started_before_resume": early,
    }


def _latency(records: Sequence[Record], plan: Plan, measured: Measured) -> dict[str, Any]:
    numbers = plan.latency_numbers
    first: dict[int, Record] = {}
    for record in records:
        if record.n in numbers and (record.n not in first or record.started_at < first[record.n].started_at):
            first[record.n] = record
    waits = sorted((record.started_at - record.enqueued_at) * 1000.0 for record in first.values())
    figures: dict[str, Any] = {"jobs": len(waits), "target_rate": plan.rate}
    figures["achieved_rate"] = _round(
        rate(len(numbers), measured.latency_enqueue_s) if measured.latency_enqueue_s else None, 1
    )
    for name, p in (("p50_ms", 50), ("p95_ms", 95), ("p99_ms", 99), ("max_ms", 100)):
        figures[name] = _round(percentile(waits, p)) if waits else None
    return figures


def build(plan: Plan, setup: Setup, measured: Measured, usage: Usage) -> dict[str, Any]:
    records = measured.records
    processing = _processing(records, plan, measured)
    expected = set(plan.warmup_numbers) | set(plan.latency_numbers) | set(plan.throughput_numbers)
    check = tally(records, expected)
    jobs = processing["jobs"]
    ms_per_job = {
        name: _round(seconds * 1000.0 / jobs, 3) if seconds is not None and jobs else None
        for name, seconds in usage.cpu_s.items()
    }
    warnings = []
    if processing["started_before_resume"]:
        warnings.append(
            f"{processing['started_before_resume']} measured jobs started before the queue was "
            "resumed: the coordinator did not honour the pause, so processing overlapped the enqueue"
        )
    other = usage.cpu_s.get("other")
    if other is not None and usage.window_s and setup.cpu_cores:
        share = other / (usage.window_s * setup.cpu_cores)
        if share > OTHER_LOAD_WARNING:
            warnings.append(
                f"other processes used {100 * share:.0f}% of the machine's {setup.cpu_cores} cores "
                "during the processing phase: the figures are lower than on a quiet machine"
            )
    report: dict[str, Any] = {
        "ok": measured.stalled is None
        and check.lost == 0
        and check.duplicates == 0
        and measured.not_succeeded == 0,
        "setup": {
            "mode": setup.mode,
            "engine": setup.engine,
            "database": setup.database,
            "target": setup.target,
            "processes": setup.processes,
            "queue": plan.queue,
            "workers": setup.workers,
            "concurrency": setup.concurrency,
            "jobs": plan.jobs,
            "batch": plan.batch,
            "latency_jobs": plan.latency_jobs,
            "rate": plan.rate,
            "backlog": plan.backlog,
            "overlap": plan.overlap,
            "cpu_cores": setup.cpu_cores,
            "loadavg_1m_before": setup.loadavg_1m_before,
        },
        "enqueue": {
            "jobs": plan.jobs,
            "seconds": _round(measured.enqueue_s, 3),
            "jobs_per_s": _round(rate(plan.jobs, measured.enqueue_s) if measured.enqueue_s else None, 1),
        },
        "processing": processing,
        "latency": _latency(records, plan, measured),
        "cpu": {
            "window_s": _round(usage.window_s, 3),
            "machine_busy_pct": _round(usage.machine_busy_pct, 1),
            "seconds": {name: _round(usage.cpu_s.get(name)) for name in COMPONENTS},
            "ms_per_job": {name: ms_per_job.get(name) for name in COMPONENTS},
            "database_counts": setup.database_cpu,
        },
        "memory": {
            "coordinator_peak_kb": usage.coordinator_peak_kb,
            "workers_peak_kb": usage.workers_peak_kb,
        },
        "backlog": {
            "jobs": plan.backlog,
            "seconds": _round(measured.backlog_s, 3),
            "jobs_per_s": _round(rate(plan.backlog, measured.backlog_s) if measured.backlog_s else None, 1),
            "ran": Counter(record.n for record in records)[BACKLOG],
        },
        "exactly_once": {
            "expected": check.expected,
            "runs": check.runs,
            "lost": check.lost,
            "duplicates": check.duplicates,
            "not_succeeded": measured.not_succeeded,
        },
        "stalled": measured.stalled,
        "warnings": warnings,
    }
    return report


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}{unit}" if abs(value) < 100 else f"{value:,.0f}{unit}"
    return f"{value}{unit}"


def render_text(report: dict[str, Any]) -> str:
    """The report as lines for a terminal."""
    setup, cpu = report["setup"], report["cpu"]
    lat, once = report["latency"], report["exactly_once"]
    lines = [
        f"runwick bench: {setup['mode']}{' ' + setup['engine'] if setup['engine'] else ''} "
        f"at {setup['target']}, "
        f"{_fmt(setup['workers'])} workers x {_fmt(setup['concurrency'])}, backlog {setup['backlog']:,}",
        f"enqueue      {_fmt(report['enqueue']['jobs_per_s'])} jobs/s "
        f"({setup['jobs']:,} jobs in batches of {setup['batch']})",
        f"processing   {_fmt(report['processing']['jobs_per_s'])} jobs/s "
        f"(first start to last completion, {_fmt(report['processing']['seconds'], ' s')})",
        f"latency      p50 {_fmt(lat['p50_ms'])}  p95 {_fmt(lat['p95_ms'])}  p99 {_fmt(lat['p99_ms'])}  "
        f"max {_fmt(lat['max_ms'])} ms (enqueue to start, {lat['jobs']} jobs "
        f"at {_fmt(lat['achieved_rate'])}/s)",
        "cpu per job  "
        + "  ".join(f"{name} {_fmt(cpu['ms_per_job'][name])}" for name in COMPONENTS)
        + f" ms (machine {_fmt(cpu['machine_busy_pct'], '%')} busy)",
        f"memory       coordinator peak {_fmt(report['memory']['coordinator_peak_kb'], ' kB')}, workers "
        + ", ".join(_fmt(kb, " kB") for kb in report["memory"]["workers_peak_kb"]),
        f"exactly once {once['runs']:,} runs of {once['expected']:,} jobs: lost {once['lost']}, "
        f"duplicates {once['duplicates']}, not succeeded {_fmt(once['not_succeeded'])}",
    ]
    if report["backlog"]["jobs"]:
        lines.append(
            f"backlog      {report['backlog']['jobs']:,} jobs loaded at "
            f"{_fmt(report['backlog']['jobs_per_s'])} jobs/s; {report['backlog']['ran']:,} ran"
        )
    if report["stalled"]:
        lines.append(f"STALLED      {report['stalled']}")
    lines.extend(f"warning      {warning}" for warning in report["warnings"])
    lines.append(
        "result       " + ("ok" if report["ok"] else "FAILED: jobs lost, duplicated or not succeeded")
    )
    return "\n".join(lines)
