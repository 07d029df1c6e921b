"""Retention settings (R-19): durations as people write them, ``runwick serve``'s
``--retain-*`` flags, ``RUNWICK_RETAIN_*`` variables and the ``[retention]`` table of the
config file (later wins), and ``CoordinatorConfig``'s checks of them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from coordinator.cli import build_parser
from coordinator.cli.bounds import resolve_bounds
from coordinator.cli.durations import DurationError, format_duration_ms, parse_duration_ms
from coordinator.cli.retention import resolve_retention, retention_from_options
from coordinator.config import ConfigError, CoordinatorConfig
from coordinator.domain.states import JobState
from tests.support import ROOT, runwick_command

SECOND = 1_000
DAY = 86_400 * SECOND


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("30s", 30 * SECOND),
        ("15m", 15 * 60 * SECOND),
        ("12h", 12 * 3_600 * SECOND),
        ("7d", 7 * DAY),
        (" 7D ", 7 * DAY),
        ("500ms", 500),
        ("1d12h", DAY + DAY // 2),
        ("1_000s", 1_000 * SECOND),
        ("0s", 0),
    ],
)
def test_durations_are_a_number_and_a_unit(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-1d", "negative"),
        ("30", "has no unit"),
        ("7 days", "not a duration"),
        ("1.5h", "not a duration"),
        ("off", "not a duration"),
        ("", "not a duration"),
        ("36501d", "over 100 years"),
    ],
)
def test_other_durations_are_refused_quoting_the_text(text: str, message: str) -> None:
    with pytest.raises(DurationError, match=message) as refused:
        parse_duration_ms(text)
    assert repr(text) in str(refused.value)


def test_durations_are_shown_in_the_largest_exact_units() -> None:
    shown = [format_duration_ms(ms) for ms in (0, 7 * DAY, 90 * 60 * SECOND, 1_500, DAY + 1)]
    assert shown == ["0", "7d", "1h30m", "1s500ms", "1d1ms"]
    for text in ("7d", "30s", "1d12h", "15m"):
        assert format_duration_ms(parse_duration_ms(text)) == text


def _serve(*argv: str) -> object:
    return build_parser().parse_args(["serve", *argv])


def test_no_setting_keeps_the_configs_defaults() -> None:
    assert retention_from_options(_serve(), {}) == {}  # type: ignore[arg-type]
    config = CoordinatorConfig()
    assert (config.retain_succeeded_ms, config.retain_failed_ms, config.retain_cancelled_ms) == (
        7 * DAY,
        30 * DAY,
        30 * DAY,
    )
    assert config.retention_interval_s == 60.0
    assert config.retention_ages_ms() == {
        JobState.SUCCEEDED: 7 * DAY,
        JobState.FAILED: 30 * DAY,
        JobState.CANCELLED: 30 * DAY,
    }


def test_flags_set_every_age_and_the_interval_and_off_keeps_forever() -> None:
    options = _serve(
        *("--retain-succeeded", "12h", "--retain-failed", "off", "--retain-cancelled", "0"),
        *("--retention-interval", "15s"),
    )
    fields = retention_from_options(options, {})  # type: ignore[arg-type]
    assert fields == {
        "retain_succeeded_ms": 12 * 3_600 * SECOND,
        "retain_failed_ms": None,
        "retain_cancelled_ms": None,
        "retention_interval_s": 15.0,
    }
    assert CoordinatorConfig(**fields).retention_ages_ms() == {JobState.SUCCEEDED: 12 * 3_600 * SECOND}


def test_config_file_then_environment_then_flag(tmp_path: Path) -> None:
    path = tmp_path / "runwick.toml"
    path.write_text(
        "[bounds]\nmax_purge_batch = 200\n\n"
        '[retention]\nretain_succeeded = "1d"\nretain_failed = "2d"\nretain_cancelled = 0\n'
        'retention_interval = "5m"\n'
    )
    environ = {"RUNWICK_RETAIN_FAILED": "3d", "RUNWICK_RETAIN_CANCELLED": "4d"}
    options = _serve("--config", str(path), "--retain-cancelled", "5d")

    fields = retention_from_options(options, environ)  # type: ignore[arg-type]

    assert fields == {
        "retain_succeeded_ms": DAY,  # the file
        "retain_failed_ms": 3 * DAY,  # the environment over the file
        "retain_cancelled_ms": 5 * DAY,  # the flag over both
        "retention_interval_s": 300.0,
    }
    # The bounds read the same file, its [retention] table included, without complaint.
    assert resolve_bounds({}, {}, str(path)).max_purge_batch == 200
    assert resolve_retention({}, {"RUNWICK_CONFIG": str(path)})["retain_failed_ms"] == 2 * DAY


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[retention]\nretain_succeded = "1d"\n', "has no setting 'retain_succeded'"),
        ("[retention]\nretain_failed = 7\n", 'must be a duration such as "7d"'),
        ("[retention]\nretain_failed = true\n", 'must be a duration such as "7d"'),
        (
            '[retention]\nretain_failed = "a week"\n',
            r"retain_failed: 'a week' is not a duration.*\(from config",
        ),
        ('[retention]\nretention_interval = "off"\n', "retention_interval: must be positive"),
        ("retention = 5\n", "must be a table"),
        (
            '[retain]\nretain_failed = "1d"\n',
            r"unknown setting\(s\) retain; known: \[bounds\], \[retention\]",
        ),
    ],
)
def test_a_wrong_retention_table_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        resolve_retention({}, {}, str(path))


def test_wrong_environment_and_flag_values_name_their_source() -> None:
    with pytest.raises(
        ConfigError, match=r"retain_succeeded: '-7d' is negative.*\(from RUNWICK_RETAIN_SUCCEEDED\)"
    ):
        resolve_retention({}, {"RUNWICK_RETAIN_SUCCEEDED": "-7d"})
    with pytest.raises(ConfigError, match=r"has no unit.*\(from --retain-cancelled\)"):
        resolve_retention({"retain_cancelled": "30"}, {})
    with pytest.raises(
        ConfigError, match=r"retention_interval: must be positive, got '0' \(from --retention"
    ):
        resolve_retention({"retention_interval": "0"}, {})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"retain_succeeded_ms": 0}, "retain_succeeded_ms must be a positive whole number"),
        ({"retain_failed_ms": -1}, "retain_failed_ms must be a positive"),
        ({"retain_cancelled_ms": 1.5}, "retain_cancelled_ms must be a positive"),
        ({"retention_interval_s": 0.0}, "retention_interval_s must be positive"),
    ],
)
def test_the_config_refuses_ages_that_are_not_positive(changes: dict[str, object], message: str) -> None:
    config = dataclasses.replace(CoordinatorConfig(), **changes)
    with pytest.raises(ConfigError, match=message):
        config.retention_ages_ms()


def test_serve_refuses_a_bad_retention_before_starting(tmp_path: Path) -> None:
    result = subprocess.run(
        runwick_command("serve", "--retain-failed", "soon", "--port", "0"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "retain_failed: 'soon' is not a duration" in result.stderr
    assert "(from --retain-failed)" in result.stderr
    assert not (tmp_path / "runwick.db").exists()


def test_serve_help_lists_the_retention_flags_with_their_defaults() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    for flag, default in (
        ("--retain-succeeded", "default 7d"),
        ("--retain-failed", "default 30d"),
        ("--retain-cancelled", "default 30d"),
        ("--retention-interval", "default 1m"),
    ):
        assert flag in text and default in text
