"""Fair turns between concurrency keys in a claim (docs/flow-control.md): one step of
``store.claims``.

In a queue where jobs with keys were enqueued (``QueueRecord.keyed``), a claim does not
simply take the first jobs in claim order, which would hand a key with a deep backlog
every slot until it drains. It takes the claim order's best priority, finds the keys
holding claimable jobs at that priority after the key last served (one probe of
``ix_jobs_claim_turns`` a key, at most as many keys as the claim wants jobs, wrapping
around to the first key), and gives each of them a turn: its next jobs, the same number
for each, in key order. What is left of the claim is filled in claim order. Priority comes
first: only keys with jobs at the best priority get turns.

The key last served is remembered per queue by the store (``turn_memory.LastServed``):
each store, so each replica, keeps its own, and a restart starts again from the first
key; both only move where the turns start, never which jobs are claimable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, bindparam, literal_column, text

from coordinator.domain.records import JobRecord
from coordinator.store.claim_reads import DUE
from coordinator.store.prepared import Prepared
from coordinator.store.rows import jobs_from
from coordinator.store.schema import CLAIMABLE_PREDICATE, JOB_COLUMNS
from coordinator.store.tx_base import TxBase


def _next_keys(inclusive: bool) -> Prepared:
    # One index probe a key (ix_jobs_claim_turns: queue, priority, key), ``n`` counting
    # them so the recursion stops at ``count`` on both engines.
    probe = (
        "(SELECT min(concurrency_key) FROM jobs WHERE jobs.queue = :queue AND "
        f"{CLAIMABLE_PREDICATE} AND jobs.priority = :priority AND jobs.concurrency_key {{op}} {{after}})"
    )
    first = probe.format(op=">=" if inclusive else ">", after=":after")
    return Prepared(
        text(
            f"WITH RECURSIVE k(key, n) AS (SELECT {first}, 1 UNION ALL "
            f"SELECT {probe.format(op='>', after='k.key')}, k.n + 1 FROM k "
            "WHERE k.key IS NOT NULL AND k.n < :count) "
            "SELECT key FROM k WHERE key IS NOT NULL"
        )
        .bindparams(bindparam("count", type_=Integer))
        .columns(literal_column("key"))
    )


_KEYS_AFTER = _next_keys(inclusive=False)
_KEYS_FROM_START = _next_keys(inclusive=True)

_HEADS_WHERE = f"jobs.queue = :queue AND {CLAIMABLE_PREDICATE} AND jobs.priority = :priority AND {DUE} "
_HEADS_SQLITE = Prepared(
    text(
        "SELECT * FROM jobs INDEXED BY ix_jobs_claim_turns WHERE "
        + _HEADS_WHERE
        + "AND jobs.concurrency_key = :key AND jobs.wire_name IN (SELECT value FROM json_each(:wire_names)) "
        "AND jobs.id NOT IN (SELECT value FROM json_each(:taken)) "
        "ORDER BY jobs.run_at_ms, jobs.id LIMIT :per"
    )
    .bindparams(bindparam("per", type_=Integer), bindparam("now_ms", type_=BigInteger))
    .columns(*(literal_column(name) for name in JOB_COLUMNS))
)
"""SQLite: one key's next jobs (one statement a key; SQLite has no LATERAL)."""
_HEADS_POSTGRES = Prepared(
    text(
        "SELECT "
        + ", ".join(f"h.{column}" for column in JOB_COLUMNS)
        + " FROM unnest(CAST(:keys AS text[])) AS k(key) CROSS JOIN LATERAL (SELECT jobs.* FROM jobs WHERE "
        + _HEADS_WHERE
        + 'AND jobs.concurrency_key = k.key COLLATE "C" AND jobs.wire_name = ANY(:wire_names) '
        "AND jobs.id <> ALL(CAST(:taken AS text[])) ORDER BY jobs.run_at_ms, jobs.id LIMIT :per "
        "FOR UPDATE OF jobs SKIP LOCKED) AS h"
    )
    .bindparams(bindparam("per", type_=Integer), bindparam("now_ms", type_=BigInteger))
    .columns(*(literal_column(name) for name in JOB_COLUMNS))
)
"""PostgreSQL: every key's next jobs in one statement, locked and skipped by other replicas."""


class ClaimTurnOps(TxBase):
    def take_turns(
        self,
        queue: str,
        in_order: list[JobRecord],
        wire_names: Sequence[str],
        taken: Sequence[str],
        full_keys: frozenset[str],
        now_ms: int,
    ) -> list[JobRecord]:
        """The jobs a claim takes from a keyed queue: ``in_order`` (the first jobs in claim
        order, as many as the claim wants) rearranged so that the keys with jobs at the
        best priority each get a turn (see the module)."""
        if not in_order:
            return in_order
        priority = in_order[0].priority
        # Two keys at least, so that a claim of one job can hand the turn on.
        wanted = max(len(in_order), 2)
        keys = [key for key in self._keys_in_turn(queue, priority, wanted) if key not in full_keys]
        if len(keys) <= 1:
            return in_order
        per = math.ceil(len(in_order) / len(keys))
        heads = self._heads(queue, priority, keys, per, wire_names, list(taken), now_ms)
        chosen: list[JobRecord] = []
        for turn in range(per):
            for key in keys:
                if turn < len(heads.get(key, ())) and len(chosen) < len(in_order):
                    chosen.append(heads[key][turn])
                    self.last_served.remember(queue, key)
        picked = {job.id for job in chosen}
        chosen += [job for job in in_order if job.id not in picked][: len(in_order) - len(chosen)]
        return chosen

    def _keys_in_turn(self, queue: str, priority: int, count: int) -> list[str]:
        """Up to ``count`` keys with claimable jobs at ``priority``: those after the key
        last served, then from the first key on."""
        params: dict[str, Any] = {"queue": queue, "priority": priority, "count": count}
        last = self.last_served.get(queue)
        keys: list[str] = []
        if last is not None:
            keys = list(_KEYS_AFTER.execute(self._conn, {**params, "after": last}).scalars())
        if len(keys) < count:
            wrapped = _KEYS_FROM_START.execute(
                self._conn, {**params, "after": "", "count": count - len(keys)}
            )
            keys += [key for key in wrapped.scalars() if key not in keys]
        return keys

    def _heads(
        self,
        queue: str,
        priority: int,
        keys: list[str],
        per: int,
        wire_names: Sequence[str],
        taken: list[str],
        now_ms: int,
    ) -> dict[str, list[JobRecord]]:
        params: dict[str, Any] = {"queue": queue, "priority": priority, "per": per, "now_ms": now_ms}
        found: list[JobRecord] = []
        if self._postgres:
            params.update(keys=keys, wire_names=list(wire_names), taken=taken)
            found = list(jobs_from(_HEADS_POSTGRES.execute(self._conn, params)))
        else:
            params.update(wire_names=json.dumps(list(wire_names)), taken=json.dumps(taken))
            for key in keys:
                found += jobs_from(_HEADS_SQLITE.execute(self._conn, {**params, "key": key}))
        heads: dict[str, list[JobRecord]] = {}
        for job in found:
            heads.setdefault(job.concurrency_key, []).append(job)
        return heads
