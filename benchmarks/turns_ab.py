"""A keyed claim's turns with and without the keys' probe and their next jobs in one
statement (``claim_turns.ClaimTurnOps._keys_with_heads``; SQLite only since this A/B
found it no faster on PostgreSQL, where "one" is now "two"), on the store path alone
(``key_claims.py``'s blocks: claim, start, finish), alternating in one process so both
variants share the machine's noise (on PostgreSQL the tables' statistics are refreshed
before each round, as a coordinator refreshes them). "two" makes the one statement give up, so every
claim probes and then reads its heads, as before it existed.

Queues: ``limit`` (``--backlog`` jobs over ``--keys`` keys, per-key limit
``--key-limit``) and ``keys`` (the same, no limit: fair turns only). It prints, per
queue and variant, the median wall time and thread CPU a job (this process only: on
PostgreSQL the server's share is in the wall time alone), and one's ratio to two's.

    python benchmarks/turns_ab.py --database-url postgresql://postgres@127.0.0.1/bench   # emptied first
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from key_claims import OPERATOR, KeyClaims
from store_path import _emptied

from coordinator.store import Store
from coordinator.store.claim_turns import ClaimTurnOps

_ONE_STATEMENT = ClaimTurnOps._keys_with_heads


def _two_statements(self: ClaimTurnOps, *args: Any) -> tuple[None, None]:
    return None, None  # the claim probes, then reads the heads


def _variant(name: str) -> None:
    ClaimTurnOps._keys_with_heads = _ONE_STATEMENT if name == "one" else _two_statements  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="a scratch PostgreSQL database (emptied first)")
    parser.add_argument("--backlog", type=int, default=100_000, help="jobs in each queue's backlog")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--key-limit", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="jobs a claim asks for")
    parser.add_argument("--block", type=int, default=1_280, help="jobs of one measured block")
    parser.add_argument("--rounds", type=int, default=7, help="measured blocks of each, alternating")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(options.database_url or f"sqlite:///{Path(folder) / 'store.db'}", create=True)
        try:
            if store.postgres:
                _emptied(store)
            bench = KeyClaims(store, options.batch)
            began = time.monotonic()
            for queue in ("limit", "keys"):
                bench.load(queue, options.backlog, options.keys)
            bench.queues.set_key_limit("limit", options.key_limit, OPERATOR)
            print(f"loaded 2 x {options.backlog} jobs in {time.monotonic() - began:.0f} s", flush=True)
            runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for round_ in range(options.rounds + 1):  # the first round warms up
                if store.postgres:  # as a coordinator does: the attempts table grows as it goes
                    store.refresh_planner_statistics()
                for queue in ("limit", "keys"):
                    for name in ("one", "two") if round_ % 2 else ("two", "one"):
                        _variant(name)
                        figure = bench.block(queue, options.block)
                        if round_:
                            runs.setdefault((queue, name), []).append(figure)
            _variant("one")
            for queue in ("limit", "keys"):
                wall = {n: statistics.median(w for w, _ in runs[queue, n]) for n in ("one", "two")}
                cpu = {n: statistics.median(c for _, c in runs[queue, n]) for n in ("one", "two")}
                for name in ("one", "two"):
                    print(
                        f"{queue:5} {name}: wall {wall[name] * 1e3:.3f} ms/job, cpu {cpu[name] * 1e3:.3f} "
                        "ms/job; runs " + " ".join(f"{w * 1e3:.3f}" for w, _ in runs[queue, name])
                    )
                ratios = f"wall {wall['one'] / wall['two']:.3f}, cpu {cpu['one'] / cpu['two']:.3f}"
                print(f"{queue:5} one/two: {ratios}")
        finally:
            store.close()


if __name__ == "__main__":
    main()
