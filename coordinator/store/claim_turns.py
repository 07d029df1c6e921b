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

Keys without room (at a per-key limit or rate, ``store.claim_keys``) get no turn, and the
probes pass over each in one step, however deep its backlog. When the claim's bounded read
found nothing (the front of the queue is all such keys' jobs), the best priority is
probed, and the next ones down when its keys have no room (``TURN_PRIORITY_LEVELS``).

On SQLite the probe and the keys' next jobs are one statement when the probe finds all
the keys the claim wants (each key's turn is then one job). PostgreSQL keeps them apart:
the same one statement there (LATERAL, locked and skipped as the heads read is) was no
faster (a claim's wall time a job 0.96-1.08x of two statements', ``benchmarks/turns_ab.py``,
two sittings, load 4-9; benchmarks/LOG.md, 2026-12-07).

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
from coordinator.store.prepared import DriverRows, Prepared
from coordinator.store.rows import jobs_from
from coordinator.store.schema import CLAIMABLE_PREDICATE, JOB_COLUMNS
from coordinator.store.tx_base import TxBase


def _keys_probe(inclusive: bool, postgres: bool) -> tuple[str, str]:
    # One index probe a key (ix_jobs_claim_turns: queue, priority, key), passing over a key
    # with no room (``:full_keys``) in its one probe; ``n`` counts the keys with room found
    # before a row's, so the recursion stops at ``count`` of them on both engines, after
    # ``count`` plus the keys without room probes at most. The CTE ``k``, and the test of
    # a key without room (to format with the key's column). ``ORDER BY ... LIMIT 1``, not
    # ``min()``: PostgreSQL, before the table was analysed, ran ``min()`` as an aggregate
    # over every entry at the priority (23,000 rows a step; benchmarks/LOG.md, 2026-12-07).
    probe = (
        "(SELECT jobs.concurrency_key FROM jobs WHERE jobs.queue = :queue AND "
        f"{CLAIMABLE_PREDICATE} AND jobs.priority = :priority AND jobs.concurrency_key {{op}} {{after}} "
        "ORDER BY jobs.queue, jobs.priority DESC, jobs.concurrency_key LIMIT 1)"
    )
    full = (
        "{} = ANY(CAST(:full_keys AS text[]))"
        if postgres
        else "{} IN (SELECT value FROM json_each(:full_keys))"
    )
    counts = f"(CASE WHEN {full.format('k.key')} THEN 0 ELSE 1 END)"
    first = probe.format(op=">=" if inclusive else ">", after=":after")
    cte = (
        f"WITH RECURSIVE k(key, n, s) AS (SELECT {first}, 0, 0 UNION ALL "
        f"SELECT {probe.format(op='>', after='k.key')}, k.n + {counts}, k.s + 1 FROM k "
        f"WHERE k.key IS NOT NULL AND k.n + {counts} < :count) "
    )
    return cte, full


def _next_keys(inclusive: bool, postgres: bool) -> Prepared:
    cte, full = _keys_probe(inclusive, postgres)
    return Prepared(
        text(f"{cte}SELECT key FROM k WHERE key IS NOT NULL AND NOT {full.format('key')} ORDER BY s")
        .bindparams(bindparam("count", type_=Integer))
        .columns(literal_column("key"))
    )


_KEYS_AFTER = {postgres: _next_keys(False, postgres) for postgres in (False, True)}
_KEYS_FROM_START = {postgres: _next_keys(True, postgres) for postgres in (False, True)}

_PRIORITY_WHERE = f"jobs.queue = :queue AND {CLAIMABLE_PREDICATE} AND {{below}} AND {DUE}"
_FIRST_PRIORITY, _PRIORITY_BELOW = (
    Prepared(
        text(
            f"SELECT jobs.priority FROM jobs WHERE {_PRIORITY_WHERE.format(below=below)} "
            "ORDER BY jobs.priority DESC, jobs.run_at_ms, jobs.id LIMIT 1"
        )
        .bindparams(bindparam("now_ms", type_=BigInteger))
        .columns(literal_column("priority"))
    )
    for below in ("1 = 1", "jobs.priority < :priority")
)
"""The best priority of a queue's claimable jobs that are due (below ``:priority``): one
probe of ix_jobs_claim each, the first entry in claim order."""
TURN_PRIORITY_LEVELS = 4
"""Priorities a claim looks at for keys with room, at most, when the best ones have none
(every key with jobs there is at its limit or rate)."""

_HEADS_WHERE = f"jobs.queue = :queue AND {CLAIMABLE_PREDICATE} AND jobs.priority = :priority AND {DUE} "
_HEADS_SQLITE = Prepared(
    text(
        "SELECT "
        + ", ".join(f"h.{column}" for column in JOB_COLUMNS)
        + " FROM json_each(:keys) AS k JOIN jobs AS h ON h.id IN (SELECT jobs.id FROM jobs "
        "INDEXED BY ix_jobs_claim_turns WHERE " + _HEADS_WHERE + "AND jobs.concurrency_key = k.value "
        "AND jobs.wire_name IN (SELECT value FROM json_each(:wire_names)) "
        "AND jobs.id NOT IN (SELECT value FROM json_each(:taken)) "
        "ORDER BY jobs.run_at_ms, jobs.id LIMIT :per) "
        "ORDER BY h.concurrency_key, h.run_at_ms, h.id"
    )
    .bindparams(bindparam("per", type_=Integer), bindparam("now_ms", type_=BigInteger))
    .columns(*(literal_column(name) for name in JOB_COLUMNS))
)
"""SQLite: every key's next jobs in one statement (SQLite has no LATERAL: a correlated
``IN`` a key, each probing ix_jobs_claim_turns, then the rows by primary key). It was one
statement a key, up to 64 a claim: one cut the store path's CPU per job of a keyed queue
with a per-key limit from 0.70x to 0.83x of a queue without keys (benchmarks/key_claims.py,
SQLite, 3 alternating runs a side, medians, load 6-9; benchmarks/LOG.md, 2026-12-06)."""


def _keys_with_heads(inclusive: bool) -> Prepared:
    # The probe of ``_next_keys`` and each key's next job, LEFT JOINed so that a key
    # without one (of other wire names, not due, handed out) still says it was found.
    cte, full = _keys_probe(inclusive, postgres=False)
    head = (
        "(SELECT jobs.id FROM jobs INDEXED BY ix_jobs_claim_turns WHERE " + _HEADS_WHERE + "AND "
        "jobs.concurrency_key = turn.key AND jobs.wire_name IN (SELECT value FROM json_each(:wire_names)) "
        "AND jobs.id NOT IN (SELECT value FROM json_each(:taken)) ORDER BY jobs.run_at_ms, jobs.id LIMIT 1)"
    )
    return Prepared(
        text(
            f"{cte}, turn(key, s) AS (SELECT key, s FROM k "
            f"WHERE key IS NOT NULL AND NOT {full.format('key')}) "
            "SELECT turn.key AS turn_key, "
            + ", ".join(f"h.{column}" for column in JOB_COLUMNS)
            + f" FROM turn LEFT JOIN jobs AS h ON h.id = {head} ORDER BY turn.s"
        )
        .bindparams(bindparam("count", type_=Integer), bindparam("now_ms", type_=BigInteger))
        .columns(*(literal_column(name) for name in ("turn_key", *JOB_COLUMNS)))
    )


_KEYS_WITH_HEADS_SQLITE = {inclusive: _keys_with_heads(inclusive) for inclusive in (False, True)}
"""SQLite: the keys in turn and the next job of each, in one statement, for the common
claim whose probe finds all the keys it wants (then each key's turn is one job)."""
_HEAD_ID_AT = 1 + JOB_COLUMNS.index("id")
"""Where a row of ``_KEYS_WITH_HEADS_SQLITE`` has its job's ID (None: the key has no job)."""

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


Turns = tuple[list[str], dict[str, list[JobRecord]], int]
"""The keys taking turns, their next jobs by key, and how many jobs a key's turn takes."""


class ClaimTurnOps(TxBase):
    def take_turns(
        self,
        queue: str,
        in_order: list[JobRecord],
        limit: int,
        wire_names: Sequence[str],
        taken: Sequence[str],
        full_keys: frozenset[str],
        now_ms: int,
    ) -> list[JobRecord]:
        """The jobs a claim of ``limit`` takes from a keyed queue: ``in_order`` (its first
        jobs in claim order, of keys with room; fewer than ``limit`` when a bounded read
        stopped in front of keys without room) rearranged so that the keys with room and
        jobs at the best priority each get a turn (see the module)."""
        if not in_order and not full_keys:
            return in_order  # nothing claimable: no key was passed over
        turns = self._turns(queue, in_order, limit, wire_names, taken, full_keys, now_ms)
        if turns is None:
            return in_order
        keys, heads, per = turns
        chosen: list[JobRecord] = []
        for turn in range(per):
            for key in keys:
                if turn < len(heads.get(key, ())) and len(chosen) < limit:
                    chosen.append(heads[key][turn])
                    self.last_served.remember(queue, key)
        picked = {job.id for job in chosen}
        chosen += [job for job in in_order if job.id not in picked][: limit - len(chosen)]
        return chosen

    def _turns(
        self,
        queue: str,
        in_order: list[JobRecord],
        limit: int,
        wire_names: Sequence[str],
        taken: Sequence[str],
        full_keys: frozenset[str],
        now_ms: int,
    ) -> Turns | None:
        """The keys taking turns, their next jobs by key and how many a key's turn takes
        (``per``); None: the claim takes ``in_order`` as it is."""
        count = max(limit, 2)
        found: tuple[int, list[str]] | None = None
        if in_order and not self._postgres:
            priority = in_order[0].priority
            quick, seen = self._keys_with_heads(queue, priority, count, full_keys, wire_names, taken, now_ms)
            if quick is not None:
                return quick
            if seen is not None:  # the keys after the one last served: only the wrap is left
                found = priority, self._keys_in_turn(queue, priority, count, full_keys, seen)
        if found is None:
            found = self._turn_keys(queue, in_order, count, full_keys, now_ms)
        if found is None:
            return None
        priority, keys = found
        if len(keys) <= 1 and len(in_order) >= limit:
            return None
        per = math.ceil(limit / len(keys))
        return keys, self._heads(queue, priority, keys, per, wire_names, list(taken), now_ms), per

    def _keys_with_heads(
        self,
        queue: str,
        priority: int,
        count: int,
        full_keys: frozenset[str],
        wire_names: Sequence[str],
        taken: Sequence[str],
        now_ms: int,
    ) -> tuple[Turns | None, list[str] | None]:
        """SQLite: the first probe of ``_keys_in_turn`` and each key's next job, in one
        statement. When it finds all ``count`` keys (the keys after the one last served,
        so no wrapping around) each key's turn is one job (``count`` is at least the
        claim's size), as ``_heads`` would have read them: (the turns, None). Else (None,
        the keys it found): the claim probes only for the keys around from the first one
        (none when it started there), then reads their heads as usual, so a queue with
        fewer keys than a claim wants pays no more statements than without this one.
        One statement less a claim: a keyed claim of 8 with a
        per-key limit (10,000 keys) took 0.274 ms of the store's time against 0.282 and
        0.314 with the probe and the heads apart (``Tx.claim`` timed on a fixed backlog,
        variants alternating in one process, the least of 40 runs of 5 claims, two
        sittings, load 13-15; benchmarks/LOG.md, 2026-12-07)."""
        last = self.last_served.get(queue)
        params: dict[str, Any] = {
            "queue": queue,
            "priority": priority,
            "count": count,
            "full_keys": json.dumps(sorted(full_keys)),
            "after": "" if last is None else last,
            "now_ms": now_ms,
            "wire_names": json.dumps(list(wire_names)),
            "taken": json.dumps(list(taken)),
        }
        rows = _KEYS_WITH_HEADS_SQLITE[last is None].execute(self._conn, params)
        if len(rows.rows) < count:
            return None, [row[0] for row in rows.rows]
        with_jobs = [row[1:] for row in rows.rows if row[_HEAD_ID_AT] is not None]
        heads = {job.concurrency_key: [job] for job in jobs_from(DriverRows(rows.keys()[1:], with_jobs))}
        return ([row[0] for row in rows.rows], heads, 1), None

    def _turn_keys(
        self, queue: str, in_order: list[JobRecord], count: int, full_keys: frozenset[str], now_ms: int
    ) -> tuple[int, list[str]] | None:
        """The priority whose keys take turns and up to ``count`` of its keys with room:
        the first job's priority or, with none read, the best priority of the queue that
        has keys with room (``TURN_PRIORITY_LEVELS`` looked at, at most). None: no keys."""
        params: dict[str, Any] = {"queue": queue, "now_ms": now_ms}
        if in_order:
            priority = in_order[0].priority
            return priority, self._keys_in_turn(queue, priority, count, full_keys)
        best = _FIRST_PRIORITY.execute(self._conn, params).scalars()
        for _ in range(TURN_PRIORITY_LEVELS):
            level = next(best, None)
            if level is None:
                return None
            keys = self._keys_in_turn(queue, level, count, full_keys)
            if keys:
                return level, keys
            best = _PRIORITY_BELOW.execute(self._conn, {**params, "priority": level}).scalars()
        return None

    def _keys_in_turn(
        self, queue: str, priority: int, count: int, full_keys: frozenset[str], after: list[str] | None = None
    ) -> list[str]:
        """Up to ``count`` keys with room and claimable jobs at ``priority``: those after
        the key last served (``after``: already found, by ``_keys_with_heads``), then
        from the first key on."""
        full = sorted(full_keys)
        params: dict[str, Any] = {
            "queue": queue,
            "priority": priority,
            "count": count,
            "full_keys": full if self._postgres else json.dumps(full),
        }
        last = self.last_served.get(queue)
        keys: list[str] = []
        if after is not None:
            keys = after
            if last is None:  # found from the first key on: there are no more
                return keys
        elif last is not None:
            keys = list(_KEYS_AFTER[self._postgres].execute(self._conn, {**params, "after": last}).scalars())
        if len(keys) < count:
            wrapped = _KEYS_FROM_START[self._postgres].execute(
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
            params.update(
                keys=json.dumps(keys), wire_names=json.dumps(list(wire_names)), taken=json.dumps(taken)
            )
            found = list(jobs_from(_HEADS_SQLITE.execute(self._conn, params)))
        heads: dict[str, list[JobRecord]] = {}
        for job in found:
            heads.setdefault(job.concurrency_key, []).append(job)
        return heads
