"""``runwick serve --processes``: the count, how it is read and checked, and what each
replica is configured with (``coordinator.cli.replicas``). The processes themselves run
in tests/integration/test_serve_processes.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator.cli.replicas import parse_processes, process_count, replica_config, usable_cores
from coordinator.config import ConfigError, CoordinatorConfig

PG = "postgresql://runwick@db.internal/runwick"
SQLITE = "sqlite:///runwick.db"


@pytest.mark.parametrize(
    ("text", "count"), [("auto", None), (" AUTO ", None), ("1", 1), ("2", 2), ("64", 64)]
)
def test_processes_are_a_count_or_auto(text: str, count: int | None) -> None:
    assert parse_processes(text) == count


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("0", "from 1 to 64 or 'auto', got 0"),
        ("-2", "from 1 to 64 or 'auto', got -2"),
        ("65", "from 1 to 64 or 'auto', got 65"),
        ("two", "a whole number from 1 to 64 or 'auto', got 'two'"),
        ("", "a whole number from 1 to 64 or 'auto', got ''"),
        ("1.5", "got '1.5'"),
    ],
)
def test_a_bad_count_is_refused_by_name(text: str, said: str) -> None:
    with pytest.raises(ValueError, match="--processes") as refused:
        parse_processes(text)
    assert said in str(refused.value)


def test_auto_is_one_process_per_usable_core_on_postgres_and_one_on_sqlite() -> None:
    assert process_count(None, PG, cores=3) == 3
    assert process_count(None, "postgresql+psycopg://u@h/d", cores=2) == 2
    assert process_count(None, SQLITE, cores=8) == 1


def test_a_count_given_is_kept_on_postgres() -> None:
    assert process_count(5, PG, cores=2) == 5
    assert process_count(1, SQLITE, cores=2) == 1


def test_more_than_one_process_on_sqlite_is_refused_with_why() -> None:
    with pytest.raises(ConfigError, match=r"--processes 2 needs PostgreSQL: SQLite has a single writer"):
        process_count(2, SQLITE, cores=4)


def test_a_malformed_url_counts_as_not_postgres_for_the_store_to_refuse() -> None:
    assert process_count(None, "not a url", cores=4) == 1


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000\n", None),  # no quota: the affinity
        ("50000 100000\n", 1),  # half a core still runs one process
        ("100000 100000\n", 1),
        ("150000 100000\n", 2),
        ("garbage\n", None),
        ("", None),
    ],
)
def test_usable_cores_follow_the_cgroup_quota_below_the_affinity(
    tmp_path: Path, cpu_max: str, expected: int | None
) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    want = _affinity() if expected is None else min(expected, _affinity())
    assert usable_cores(path) == want


def test_usable_cores_without_a_cgroup_file_are_the_affinity(tmp_path: Path) -> None:
    assert usable_cores(tmp_path / "missing") == _affinity()


def test_a_replica_shares_the_port_and_leaves_the_first_process_its_own_ports_and_token() -> None:
    first = CoordinatorConfig(
        database_url=PG,
        port=0,
        share_port=True,
        health_port=7234,
        metrics_port=9233,
        dashboard_port=7235,
        bootstrap_token="rwk_0123456789abcdef_" + "a" * 43,
        admin_token_file="/var/run/token",
    )
    second = replica_config(first, 2, 41_000)
    assert (second.port, second.share_port, second.metrics_port) == (41_000, True, 9235)
    assert (second.health_port, second.dashboard_port) == (None, None)
    assert (second.bootstrap_token, second.generate_bootstrap_token, second.admin_token_file) == (
        None,
        False,
        None,
    )
    assert (second.database_url, second.drain_timeout_s, second.bounds) == (
        PG,
        first.drain_timeout_s,
        first.bounds,
    )


@pytest.mark.parametrize(("metrics_port", "expected"), [(0, 0), (None, None), (9000, 9001)])
def test_a_replica_serves_metrics_beside_the_first_process(
    metrics_port: int | None, expected: int | None
) -> None:
    config = replica_config(CoordinatorConfig(database_url=PG, metrics_port=metrics_port), 1, 7233)
    assert config.metrics_port == expected
