"""Where client commands take their bearer token from: ``--token``, ``--token-file``,
``RUNWICK_TOKEN`` or ``RUNWICK_TOKEN_FILE`` (``coordinator.cli.connect``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from coordinator.cli.connect import add_connection_flags, bearer_token
from worker_sdk import ArgumentError

TOKEN = "rwk_0123456789abcdef_" + "A" * 43


def parsed(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_connection_flags(parser)
    return parser.parse_args(list(args))


@pytest.fixture(autouse=True)
def no_token_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNWICK_TOKEN", raising=False)
    monkeypatch.delenv("RUNWICK_TOKEN_FILE", raising=False)


@pytest.mark.parametrize("ending", ["", "\n", "\r\n"])
def test_the_file_holds_the_token_and_its_trailing_newline_is_dropped(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "token"
    path.write_bytes((TOKEN + ending).encode())
    assert bearer_token(parsed("--token-file", str(path))) == TOKEN


def test_the_variable_names_the_file_when_no_flag_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    monkeypatch.setenv("RUNWICK_TOKEN_FILE", str(path))
    assert bearer_token(parsed()) == TOKEN


def test_a_flag_wins_over_either_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text("rwk_from_the_file")
    monkeypatch.setenv("RUNWICK_TOKEN", "rwk_from_the_variable")
    assert bearer_token(parsed("--token-file", str(path))) == "rwk_from_the_file"
    monkeypatch.delenv("RUNWICK_TOKEN")
    monkeypatch.setenv("RUNWICK_TOKEN_FILE", str(path))
    assert bearer_token(parsed("--token", TOKEN)) == TOKEN


def test_no_token_anywhere_is_none() -> None:
    assert bearer_token(parsed()) is None


def test_both_flags_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parsed("--token", TOKEN, "--token-file", str(tmp_path / "token"))
    assert exited.value.code == 2
    assert "argument --token-file: not allowed with argument --token" in capsys.readouterr().err


def test_both_variables_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNWICK_TOKEN", TOKEN)
    monkeypatch.setenv("RUNWICK_TOKEN_FILE", str(tmp_path / "token"))
    with pytest.raises(ArgumentError, match="set RUNWICK_TOKEN or RUNWICK_TOKEN_FILE, not both"):
        bearer_token(parsed())


def test_an_unreadable_or_empty_file_is_a_clear_error_that_does_not_echo_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ArgumentError) as refused:
        bearer_token(parsed("--token-file", str(missing)))
    assert (
        str(refused.value) == f"--token-file: cannot read the token file {missing}: No such file or directory"
    )

    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ArgumentError, match=f"--token-file: the token file {empty} is empty"):
        bearer_token(parsed("--token-file", str(empty)))

    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + TOKEN.encode())
    with pytest.raises(ArgumentError) as refused:
        bearer_token(parsed("--token-file", str(binary)))
    assert str(refused.value) == f"--token-file: cannot read the token file {binary}: not UTF-8 text"
