"""The chaos workloads: real coordinators and workers under a seeded nemesis, checked
by ``tests.chaos.checker``. Bounded by default; ``--chaos-minutes N`` for a long run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import ChaosOptions
from tests.chaos.harness import FAULT_WEIGHTS, RunResult, Settings, logs_tail, run_chaos
from tests.chaos.pgcluster import ThrowawayCluster
from tests.conftest import _truncate
from tests.support.processes import ROOT

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def _verdict(result: RunResult, options: ChaosOptions, tmp_path: Path, name: str) -> None:
    report = check(result.history)
    header = result.history.header
    summary = f"{report.summary()}\n  run took {result.seconds:.1f} s; history {result.history_path}"
    options.summaries.append(summary)
    print(summary)
    if report.ok and not result.problems:
        return
    keep = options.keep or tmp_path
    keep.mkdir(parents=True, exist_ok=True)
    kept = keep / f"chaos-{name}-seed{header['seed']}.jsonl"
    if kept != result.history_path:
        shutil.copyfile(result.history_path, kept)
    problems = "".join(f"\n  harness: {p}" for p in result.problems)
    pytest.fail(
        f"{summary}{problems}\n"
        f"failing history and seed kept in {kept}\n"
        f"re-check: python -m tests.chaos.check {kept}\n"
        f"run the schedule again: pytest tests/chaos/test_chaos.py::{name} --chaos-seed {header['seed']}"
        " (same faults and payloads; real processes interleave anew)\n"
        f"{logs_tail(result.history_path.parent)}",
        pytrace=False,
    )


async def test_chaos_sqlite(chaos_options: ChaosOptions, tmp_path: Path) -> None:
    """One coordinator on SQLite, killed and restarted on the same file; jobs over five
    keys, one with a deep backlog, under a per-key limit and a queue limit."""
    settings = Settings(
        engine="sqlite",
        database_url=f"sqlite:///{tmp_path / 'runwick.db'}",
        workdir=tmp_path / "run",
        seed=chaos_options.seed_for("sqlite"),
        fault_seconds=chaos_options.fault_seconds,
        # 12 slots (3 workers x 4): the queue limit leaves some idle, and k0's 40% of
        # the jobs wait on its 3 slots (longest when a stopped worker holds them) while
        # the other keys take turns. Tighter limits lengthen the quiet period's drain.
        concurrency_keys=5,
        key_limit=3,
        queue_limit=10,
    )
    _verdict(await run_chaos(settings), chaos_options, tmp_path, "test_chaos_sqlite")


@pytest.mark.postgres
async def test_chaos_postgres_two_replicas(
    chaos_options: ChaosOptions, postgres_url: str, tmp_path: Path
) -> None:
    """Two replicas over the run's PostgreSQL database, sharing a queue rate and a
    per-key limit over five keys: one at a time is killed, and their backends are
    terminated."""
    _truncate(postgres_url)
    settings = Settings(
        engine="postgres",
        database_url=postgres_url,
        workdir=tmp_path / "run",
        seed=chaos_options.seed_for("postgres"),
        fault_seconds=chaos_options.fault_seconds,
        replicas=2,
        # Both replicas claim and start under one rate and one per-key limit, while
        # either is killed.
        queue_rate=(8, 1_000),
        concurrency_keys=5,
        key_limit=2,
    )
    _verdict(await run_chaos(settings), chaos_options, tmp_path, "test_chaos_postgres_two_replicas")


@pytest.mark.postgres
async def test_chaos_postgres_database_restarts(chaos_options: ChaosOptions, tmp_path: Path) -> None:
    """Two replicas over a throwaway cluster of this machine's PostgreSQL, which the
    nemesis also crashes and restarts (``pg_ctl restart -m immediate``)."""
    cluster = ThrowawayCluster().start()
    try:
        migrate = [sys.executable, "-m", "coordinator.cli", "migrate", "--database-url", cluster.url]
        done = subprocess.run(migrate, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        settings = Settings(
            engine="postgres",
            database_url=cluster.url,
            workdir=tmp_path / "run",
            seed=chaos_options.seed_for("postgres-restarts"),
            # The bounded run keeps this one short: the other workloads cover the rest.
            fault_seconds=chaos_options.fault_seconds * (1 if chaos_options.long else 0.6),
            replicas=2,
            pg_cluster=cluster,
            faults={**FAULT_WEIGHTS, "pg_restart": 3.0},
        )
        result = await run_chaos(settings)
        _verdict(result, chaos_options, tmp_path, "test_chaos_postgres_database_restarts")
    finally:
        (tmp_path / "postgres.log").write_text(cluster.log_tail(100_000))
        cluster.stop()
