"""Options and fixtures of the chaos suite.

``--chaos-minutes N`` makes each workload's fault phase last N minutes (default: the
bounded run, a few seconds of faults per workload, part of the normal test command);
``--chaos-seed S`` replays a schedule; ``--chaos-keep DIR`` is where failing histories
are written (default: the test's tmp_path). Pass them with ``tests/chaos`` on the command
line (``./tests/run.sh tests/chaos --chaos-minutes 30``) so pytest reads this file first.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BOUNDED_FAULT_SECONDS = 10.0
"""The fault phase of each workload in the bounded run."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "chaos suite (tests/chaos)")
    group.addoption(
        "--chaos-minutes",
        type=float,
        default=None,
        help="minutes of faults per chaos workload (default: the bounded run)",
    )
    group.addoption("--chaos-seed", type=int, default=None, help="seed of the fault schedule and workload")
    group.addoption("--chaos-keep", default=None, help="directory for the histories of failing runs")


def _option(config: pytest.Config, name: str) -> object:
    try:
        return config.getoption(name)
    except ValueError:  # this conftest was not read before the command line was parsed
        return None


@dataclass
class ChaosOptions:
    fault_seconds: float
    long: bool
    seed: int | None
    keep: Path | None
    summaries: list[str] = field(default_factory=list)

    def seed_for(self, name: str) -> int:
        if self.seed is not None:
            return self.seed
        return int.from_bytes(os.urandom(4), "big") ^ random.Random(name).getrandbits(32)


def _options(config: pytest.Config) -> ChaosOptions:
    options = config.stash.get(_KEY, None)
    if options is None:
        minutes = _option(config, "--chaos-minutes")
        seed = _option(config, "--chaos-seed")
        keep = _option(config, "--chaos-keep")
        options = ChaosOptions(
            fault_seconds=BOUNDED_FAULT_SECONDS if minutes is None else float(minutes) * 60,  # type: ignore[arg-type]
            long=minutes is not None,
            seed=None if seed is None else int(seed),  # type: ignore[call-overload]
            keep=None if keep is None else Path(str(keep)),
        )
        config.stash[_KEY] = options
    return options


_KEY = pytest.StashKey[ChaosOptions]()


@pytest.fixture
def chaos_options(request: pytest.FixtureRequest) -> ChaosOptions:
    return _options(request.config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A long run outlasts the suite's per-test timeout: give workloads their minutes."""
    options = _options(config)
    if not options.long:
        return
    for item in items:
        if "chaos_options" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(options.fault_seconds + 600))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    options = config.stash.get(_KEY, None)
    if options is None or not options.summaries:
        return
    terminalreporter.section("chaos summary")
    for summary in options.summaries:
        terminalreporter.write_line(summary)
