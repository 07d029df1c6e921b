"""The pure parts of ``runwick bench``: percentiles, /proc parsing over a fake tree, the
sink's records and the exactly-once tally, and the report built from them."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.cli.bench import procfs
from coordinator.cli.bench.phases import Measured, Plan
from coordinator.cli.bench.report import Setup, Usage, build, render_text
from coordinator.cli.bench.sink import (
    BACKLOG,
    Record,
    SinkReader,
    SinkWriter,
    format_record,
    parse_record,
    tally,
)
from coordinator.cli.bench.stats import percentile, rate

# -- percentiles ---------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 0) == 10.0
    assert percentile(values, 100) == 40.0
    assert percentile(values, 50) == 25.0
    assert percentile(values, 25) == pytest.approx(17.5)


def test_percentile_agrees_with_the_inclusive_quantiles() -> None:
    values = sorted(float((n * 37) % 101) for n in range(250))
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for p in (1, 50, 95, 99):
        assert percentile(values, p) == pytest.approx(cuts[p - 1])


def test_percentile_of_one_value_is_that_value() -> None:
    assert percentile([7.5], 99) == 7.5


@pytest.mark.parametrize("values,p", [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_refuses_no_values_and_out_of_range(values: list[float], p: float) -> None:
    with pytest.raises(ValueError):
        percentile(values, p)


def test_rate_without_elapsed_time_is_none() -> None:
    assert rate(10, 0.0) is None
    assert rate(10, 2.0) == 5.0


# -- /proc ---------------------------------------------------------------------------


def _stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 1 0 5 0 0\n"


def _fake_proc(root: Path, processes: dict[int, tuple[str, int, int, int]], hwm_kb: int = 0) -> Path:
    for pid, (comm, ppid, utime, stime) in processes.items():
        folder = root / str(pid)
        folder.mkdir(parents=True)
        (folder / "stat").write_text(_stat_line(pid, comm, ppid, utime, stime))
        (folder / "status").write_text(
            f"Name:\t{comm}\nVmHWM:\t  {hwm_kb + pid} kB\nVmRSS:\t   10 kB\nThreads:\t4\n"
        )
    (root / "stat").write_text("cpu  100 5 50 800 20 1 2 3 0 0\ncpu0 50 2 25 400 10 0 1 1 0 0\n")
    (root / "self").mkdir(exist_ok=True)  # not a pid: skipped
    return root


def test_parse_stat_reads_parent_and_cpu_ticks() -> None:
    stat = procfs.parse_stat(_stat_line(42, "python3", 7, 120, 30))
    assert (stat.pid, stat.comm, stat.ppid, stat.cpu_ticks) == (42, "python3", 7, 150)


def test_parse_stat_takes_fields_after_the_last_parenthesis() -> None:
    stat = procfs.parse_stat(_stat_line(9, "a (b) c) d", 3, 5, 6))
    assert (stat.comm, stat.ppid, stat.cpu_ticks) == ("a (b) c) d", 3, 11)


@pytest.mark.parametrize("text", ["", "garbage", "12 (x) S 1 2"])
def test_parse_stat_refuses_what_is_not_a_stat_line(text: str) -> None:
    with pytest.raises(ValueError):
        procfs.parse_stat(text)


def test_parse_status_reads_kb_fields_only() -> None:
    values = procfs.parse_status("Name:\tpostgres\nVmHWM:\t  91234 kB\nVmRSS:\t 5000 kB\nThreads:\t3\n")
    assert values == {"VmHWM": 91234, "VmRSS": 5000}


def test_a_fake_proc_tree_gives_descendants_ticks_and_memory(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        {
            1: ("init", 0, 1, 1),
            10: ("runwick", 1, 100, 20),
            11: ("store", 10, 30, 5),
            12: ("helper", 11, 1, 1),
            20: ("worker", 1, 50, 10),
        },
        hwm_kb=1000,
    )
    stats = procfs.all_stats(proc)
    assert set(stats) == {1, 10, 11, 12, 20}
    assert procfs.descendants(10, stats) == {10, 11, 12}
    assert procfs.descendants(99, stats) == set()
    assert procfs.cpu_ticks({10, 11, 99}, stats) == {10: 120, 11: 35}
    assert procfs.peak_rss_kb(20, proc) == 1020
    assert procfs.peak_rss_kb(99, proc) is None
    assert procfs.read_stat(99, proc) is None
    machine = procfs.machine_cpu(proc)
    assert machine == procfs.MachineCpu(busy=161, total=981)


def test_ticks_used_counts_new_processes_whole_and_ended_ones_not() -> None:
    before = {1: 100, 2: 50}
    after = {1: 130, 3: 7}  # 2 ended in between, 3 started
    assert procfs.ticks_used(before, after) == 37


def test_machine_cpu_refuses_another_file() -> None:
    with pytest.raises(ValueError):
        procfs.parse_machine_cpu("intr 1 2 3\n")


def test_this_process_is_readable_in_the_real_proc() -> None:
    stat = procfs.read_stat(os.getpid())
    assert stat is not None and stat.cpu_ticks >= 0 and stat.ppid == os.getppid()
    assert (procfs.peak_rss_kb(os.getpid()) or 0) > 0


# -- the sink ------------------------------------------------------------------------


def test_a_record_round_trips_through_its_line() -> None:
    record = Record(12, 1700000000.123456, 1700000000.2, 1700000000.25, 4321)
    assert parse_record(format_record(record).decode()) == record
    with pytest.raises(ValueError):
        parse_record("1 2 3")


def test_the_reader_takes_complete_lines_only_and_skips_earlier_runs(tmp_path: Path) -> None:
    earlier = tmp_path / "sink-1.log"
    earlier.write_bytes(format_record(Record(0, 1.0, 2.0, 3.0, 1)))
    reader = SinkReader(tmp_path)
    reader.skip_existing()
    with earlier.open("ab") as file:
        file.write(format_record(Record(1, 1.0, 2.0, 3.0, 1)) + b"2 1.0 2.0")  # a line half written
    assert reader.poll() == 1 and [r.n for r in reader.records] == [1]
    with earlier.open("ab") as file:
        file.write(b" 3.0 1\n")
    writer = SinkWriter(tmp_path)
    writer.write(Record(3, 1.0, 2.0, 3.0, os.getpid()))
    writer.close()
    assert reader.poll() == 2
    assert sorted(r.n for r in reader.records) == [1, 2, 3]
    assert reader.poll() == 0


def test_tally_counts_lost_and_duplicate_runs_of_the_expected_numbers() -> None:
    records = [Record(n, 0.0, 0.0, 0.0, 1) for n in (0, 1, 1, 1, 3, BACKLOG, BACKLOG, 99)]
    check = tally(records, range(5))
    assert (check.expected, check.runs, check.lost, check.duplicates) == (5, 5, 2, 2)


# -- the report ----------------------------------------------------------------------

_PLAN = Plan(
    jobs=4,
    batch=2,
    latency_jobs=3,
    rate=100.0,
    backlog=10,
    overlap=False,
    warmup=1,
    queue="q",
    settle_s=0.0,
    stall_timeout_s=1.0,
)
_SETUP = Setup("local", "sqlite", "/tmp/x.db", "127.0.0.1:1", 2, 8, 2, 0.1, "not separate")


def _usage(other: float = 0.0) -> Usage:
    cpu = {"coordinator": 0.4, "workers": 0.2, "database": None, "database_server": None, "bench": 0.0}
    return Usage(2.0, {**cpu, "other": other}, 50.0, 90_000, [40_000, 41_000])


def _records(duplicate: bool = False) -> list[Record]:
    rows = [Record(-2, 0.0, 0.1, 0.1, 1)]  # the warm-up job
    rows += [Record(n, 10.0 + n, 10.0 + n + 0.001 * (n + 1), 10.0 + n + 0.002, 1) for n in range(3)]
    rows += [Record(n, 20.0, 21.0 + (n - 3) * 0.5, 21.1 + (n - 3) * 0.5, 1) for n in range(3, 7)]
    rows += [Record(BACKLOG, 5.0, 23.0, 23.0, 1)]
    if duplicate:
        rows.append(Record(4, 20.0, 22.9, 23.0, 1))
    return rows


def test_the_report_computes_every_figure_from_the_records() -> None:
    measured = Measured(enqueue_s=0.5, backlog_s=0.25, latency_enqueue_s=0.03, resumed_at=20.5)
    measured.records, measured.not_succeeded = _records(), 0
    report = build(_PLAN, _SETUP, measured, _usage())
    assert report["ok"] is True
    assert report["enqueue"] == {"jobs": 4, "seconds": 0.5, "jobs_per_s": 8.0}
    assert report["processing"] == {"jobs": 4, "seconds": 1.6, "jobs_per_s": 2.5, "started_before_resume": 0}
    assert report["latency"]["jobs"] == 3
    assert (report["latency"]["p50_ms"], report["latency"]["max_ms"]) == (2.0, 3.0)
    assert report["cpu"]["ms_per_job"]["coordinator"] == 100.0
    assert report["cpu"]["ms_per_job"]["database"] is None
    assert report["backlog"] == {"jobs": 10, "seconds": 0.25, "jobs_per_s": 40.0, "ran": 1}
    assert report["exactly_once"] == {
        "expected": 8,
        "runs": 8,
        "lost": 0,
        "duplicates": 0,
        "not_succeeded": 0,
    }
    assert report["warnings"] == []
    assert "result       ok" in render_text(report)


def test_a_duplicate_a_loss_or_an_early_start_shows_in_the_report() -> None:
    measured = Measured(enqueue_s=0.5, latency_enqueue_s=0.03, resumed_at=21.2)
    measured.records = [r for r in _records(duplicate=True) if r.n != 1]
    measured.not_succeeded = 1
    report = build(_PLAN, _SETUP, measured, _usage(other=1.0))
    assert report["ok"] is False
    once = report["exactly_once"]
    assert (once["lost"], once["duplicates"], once["not_succeeded"]) == (1, 1, 1)
    assert report["processing"]["started_before_resume"] == 1
    assert len(report["warnings"]) == 2  # the pause was not honoured; the machine was busy
    assert "FAILED" in render_text(report)


# -- flags ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--batch", "0"], "--batch must be at least 1"),
        (["--latency-jobs", "-1"], "--latency-jobs must be 0 or more"),
        (["--rate", "0"], "--rate must be above 0"),
        (["--no-workers"], "need --target"),
        (["--tls"], "need --target"),
        (["--token", "rwk_x"], "need --target"),
        (["--database-url", "sqlite:///x.db"], "SQLite database is always a fresh file"),
        (["--target", "127.0.0.1:1", "--engine", "postgres"], "--target measures a deployment"),
        (["--target", "127.0.0.1:1", "--no-workers"], "--no-workers needs --sink and --queue"),
        (["--processes", "2"], "--processes over 1 needs --engine postgres"),
        (["--engine", "postgres", "--processes", "0"], "--processes must be from 1 to 64"),
        (["--engine", "postgres", "--processes", "x"], "a whole number from 1 to 64 or 'auto'"),
        (["--target", "127.0.0.1:1", "--processes", "2"], "--target measures a deployment"),
        (["--queue-rate", "0/1s"], "count must be 1"),
        (["--queue-rate", "abc"], "COUNT/PERIOD"),
    ],
)
def test_bad_flags_exit_2_before_anything_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    assert main(["bench", "--work-dir", str(work), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not work.exists()
