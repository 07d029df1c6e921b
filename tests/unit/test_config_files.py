"""Settings read from mounted files (``RUNWICK_X_FILE``, as Kubernetes mounts a Secret)
and the checks on the operator's settings that ``serve`` runs before anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from coordinator.cli import build_parser
from coordinator.cli.database_flags import database_url
from coordinator.cli.metrics_flags import metrics_config
from coordinator.cli.security_flags import bootstrap_token
from coordinator.config import (
    DEFAULT_DATABASE_URL,
    ConfigError,
    CoordinatorConfig,
    check_security,
    env_or_file,
)
from coordinator.store.engine import UnsupportedDatabase, normalize_url


def test_a_setting_comes_from_its_variable_or_from_the_file_its_file_variable_names(tmp_path: Path) -> None:
    mounted = tmp_path / "url"
    mounted.write_text("postgresql://runwick:pw@db/runwick\n")  # a Secret's file ends in a newline
    assert env_or_file({}, "RUNWICK_DATABASE_URL") is None
    assert env_or_file({"RUNWICK_DATABASE_URL": "sqlite:///a.db"}, "RUNWICK_DATABASE_URL") == (
        "sqlite:///a.db",
        "RUNWICK_DATABASE_URL",
    )
    value, where = env_or_file({"RUNWICK_DATABASE_URL_FILE": str(mounted)}, "RUNWICK_DATABASE_URL")
    assert value == "postgresql://runwick:pw@db/runwick" and str(mounted) in where


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RUNWICK_DATABASE_URL": "sqlite:///a.db", "RUNWICK_DATABASE_URL_FILE": "/x"}, "not both"),
        ({"RUNWICK_DATABASE_URL_FILE": "/nonexistent/url"}, "cannot read /nonexistent/url"),
        ({"RUNWICK_DATABASE_URL_FILE": "EMPTY"}, "is empty"),
    ],
    ids=["both", "missing", "empty"],
)
def test_a_bad_setting_file_is_a_clear_error(tmp_path: Path, environ: dict[str, str], message: str) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    environ = {key: str(empty) if value == "EMPTY" else value for key, value in environ.items()}
    with pytest.raises(ConfigError, match=message) as raised:
        env_or_file(environ, "RUNWICK_DATABASE_URL")
    assert "RUNWICK_DATABASE_URL" in str(raised.value)


def serve_options(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *args])


def test_the_flag_wins_over_the_environment_and_the_default_is_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RUNWICK_DATABASE_URL", "RUNWICK_DATABASE_URL_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert database_url(serve_options()) == DEFAULT_DATABASE_URL
    mounted = tmp_path / "url"
    mounted.write_text("sqlite:///mounted.db")
    environ = {"RUNWICK_DATABASE_URL_FILE": str(mounted)}
    assert database_url(serve_options(), environ) == "sqlite:///mounted.db"
    assert database_url(serve_options("--database-url", "sqlite:///flag.db"), environ) == "sqlite:///flag.db"
    token_file = tmp_path / "token"
    token_file.write_text("rwk_0123456789abcdef_" + "x" * 43 + "\n")
    options = serve_options("--bootstrap-token-file", str(token_file))
    assert (
        bootstrap_token(options, {"RUNWICK_BOOTSTRAP_TOKEN": "other"}) == "rwk_0123456789abcdef_" + "x" * 43
    )
    assert bootstrap_token(serve_options(), {}) is None


def test_a_missing_bootstrap_token_file_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kubernetes mounts the admin-token Secret optionally: once the first install made its
    token the Secret may go, and the coordinator must still start (the file is read only
    while no token exists). A file that exists but cannot be read is still an error."""
    gone = str(tmp_path / "admin" / "token")
    with caplog.at_level("WARNING", logger="runwick"):
        assert bootstrap_token(serve_options("--bootstrap-token-file", gone), {}) is None
        assert bootstrap_token(serve_options(), {"RUNWICK_BOOTSTRAP_TOKEN_FILE": gone}) is None
    assert [r.getMessage().count(gone) for r in caplog.records] == [1, 1]
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        bootstrap_token(serve_options("--bootstrap-token-file", str(empty)), {})


def test_the_supplied_token_never_shows_in_the_config_repr() -> None:
    config = CoordinatorConfig(bootstrap_token="rwk_0123456789abcdef_" + "s" * 43)
    assert "sssss" not in repr(config)


def test_label_values_need_room_for_at_least_one() -> None:
    with pytest.raises(ConfigError, match="metrics_max_label_values must be at least 1"):
        check_security(CoordinatorConfig(metrics_max_label_values=0))


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("postgres://app@db/app", "postgresql+psycopg://app@db/app"),
        ("postgresql://app@db/app", "postgresql+psycopg://app@db/app"),
        ("postgresql+psycopg://app@db/app", "postgresql+psycopg://app@db/app"),
        ("sqlite:///runwick.db", "sqlite:///runwick.db"),
    ],
)
def test_database_urls_take_the_common_postgres_scheme(given: str, used: str) -> None:
    assert normalize_url(given) == used


@pytest.mark.parametrize("url", ["mysql://app@db/app", "oracle://x@y/z", "::::", "mssql+pyodbc://a@b/c"])
def test_database_urls_of_other_databases_are_refused_by_name(url: str) -> None:
    with pytest.raises(UnsupportedDatabase, match=r"SQLite and PostgreSQL|does not parse"):
        normalize_url(url)


METRICS_TOKEN = "a-metrics-token-0123456789"


def test_the_metrics_token_comes_from_its_file_flag_or_variables(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics-token"
    token_file.write_text(METRICS_TOKEN + "\n")
    options = serve_options(
        "--metrics-token-file", str(token_file), "--metrics-tls", "--metrics-max-series", "50"
    )
    assert metrics_config(options, {"RUNWICK_METRICS_TOKEN": "other"}) == {
        "metrics_max_series": 50,
        "metrics_tls": True,
        "metrics_token": METRICS_TOKEN,
    }
    assert metrics_config(serve_options(), {"RUNWICK_METRICS_TOKEN_FILE": str(token_file)})[
        "metrics_token"
    ] == (METRICS_TOKEN)
    assert metrics_config(serve_options(), {}) == {
        "metrics_max_series": 500,
        "metrics_tls": False,
        "metrics_token": None,
    }
    with pytest.raises(ConfigError, match="--metrics-token-file: cannot read"):
        metrics_config(serve_options("--metrics-token-file", str(tmp_path / "missing")), {})
    assert METRICS_TOKEN not in repr(CoordinatorConfig(metrics_token=METRICS_TOKEN))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"metrics_max_series": 17}, "--metrics-max-series must be at least 18"),
        ({"metrics_tls": True}, "--metrics-tls serves /metrics with the API's certificate"),
        ({"metrics_token": "short"}, "at least 16 printable ASCII characters"),
        ({"metrics_token": "x" * 20 + " y"}, "without spaces"),
        ({"metrics_token": "x" * 20 + "\r\nX-Injected: 1"}, "without spaces"),
        ({"metrics_max_connections": 0}, "metrics_max_connections must be at least 1"),
        ({"metrics_max_header_bytes": 100}, "metrics_max_header_bytes must be at least 1024"),
        ({"metrics_idle_timeout_s": 0}, "metrics_idle_timeout_s must be positive"),
    ],
    ids=[
        "series",
        "tls-without-cert",
        "short-token",
        "spaced-token",
        "header-token",
        "connections",
        "head",
        "idle",
    ],
)
def test_metrics_settings_that_leave_nothing_bounded_or_served_are_refused(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        check_security(CoordinatorConfig(**settings))  # type: ignore[arg-type]
