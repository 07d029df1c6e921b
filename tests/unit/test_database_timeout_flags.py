"""``runwick serve``'s database timeouts: a flag and an environment variable each, in
seconds, becoming the ``CoordinatorConfig`` fields in milliseconds."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.cli import build_parser
from coordinator.cli.database_flags import DATABASE_TIMEOUTS, database_timeouts_config
from coordinator.config import CoordinatorConfig

FIELDS = [f"{stem}_ms" for stem, _, _ in DATABASE_TIMEOUTS]


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for stem, _, _ in DATABASE_TIMEOUTS:
        monkeypatch.delenv(f"RUNWICK_{stem.upper()}_S", raising=False)


def _config(*argv: str) -> dict[str, int]:
    return database_timeouts_config(build_parser().parse_args(["serve", *argv]))


def test_the_flags_default_to_the_config_defaults() -> None:
    defaults = CoordinatorConfig()
    assert _config() == {name: getattr(defaults, name) for name in FIELDS}
    assert set(FIELDS) == {
        "pg_idle_in_transaction_timeout_ms",
        "pg_lock_timeout_ms",
        "pg_statement_timeout_ms",
        "sqlite_busy_timeout_ms",
    }
    assert set(FIELDS) <= {item.name for item in dataclasses.fields(CoordinatorConfig)}


def test_each_timeout_has_a_flag_and_an_environment_variable_in_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for stem, _, _ in DATABASE_TIMEOUTS:
        flag = "--" + stem.replace("_", "-")
        assert _config(flag, "0.25")[f"{stem}_ms"] == 250
        assert _config(flag, "0")[f"{stem}_ms"] == 0  # off
        monkeypatch.setenv(f"RUNWICK_{stem.upper()}_S", "2")
        assert _config()[f"{stem}_ms"] == 2_000
        assert _config(flag, "3")[f"{stem}_ms"] == 3_000  # the flag wins


@pytest.mark.parametrize("value", ["-1", "abc", "3000000"])
def test_a_wrong_timeout_stops_serve_with_a_message(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _config("--pg-lock-timeout", value)
    assert "--pg-lock-timeout" in capsys.readouterr().err
