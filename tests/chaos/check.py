"""Re-runs the checker on a saved history: ``python -m tests.chaos.check FILE [...]``.

Prints each history's summary; exits 1 when any has a violation, 2 when one cannot be
read. ``--only NAME`` (repeatable) runs only the named invariants.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.chaos.checker import INVARIANTS, check
from tests.chaos.history import load_history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.check", description=__doc__)
    parser.add_argument("histories", nargs="+", type=Path, help="history.jsonl files")
    parser.add_argument("--only", action="append", choices=sorted(INVARIANTS), help="run only this invariant")
    options = parser.parse_args(argv)
    status = 0
    for path in options.histories:
        try:
            history = load_history(path)
        except (OSError, ValueError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            return 2
        report = check(history, options.only)
        print(f"{path}:\n{report.summary(max_violations=1_000)}")
        if not report.ok:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
