"""``runwick serve``'s ingress caps: flags and variables reach ``IngressLimits``; bad
values are refused by name."""

from __future__ import annotations

import argparse

import pytest

from coordinator.cli.ingress import add_ingress_flags, ingress_config
from coordinator.config import ConfigError, CoordinatorConfig, IngressLimits, check_security


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_ingress_flags(parser)
    return parser.parse_args(list(argv))


def test_defaults_are_the_config_defaults() -> None:
    assert ingress_config(_parse()) == {"ingress": IngressLimits()}


def test_flags_and_variables_set_the_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNWICK_MAX_HEALTH_WATCHES", "7")
    options = _parse(
        "--max-concurrent-rpcs", "50", "--max-streams-per-connection", "4", "--max-connections", "9"
    )
    assert ingress_config(options)["ingress"] == IngressLimits(
        max_connections=9, max_streams_per_connection=4, max_concurrent_rpcs=50, max_health_watches=7
    )


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_cap_below_one_is_refused(value: str) -> None:
    with pytest.raises(argparse.ArgumentError, match="max-concurrent-rpcs"):
        _parse("--max-concurrent-rpcs", value)


def test_the_config_refuses_a_cap_below_one() -> None:
    config = CoordinatorConfig(ingress=IngressLimits(max_health_watches=0))
    with pytest.raises(ConfigError, match="max_health_watches"):
        check_security(config)


def test_the_config_refuses_a_connection_cap_below_one() -> None:
    config = CoordinatorConfig(ingress=IngressLimits(max_connections=0))
    with pytest.raises(ConfigError, match="max_connections"):
        check_security(config)
