"""The hot queries walk their partial indexes on both engines; a scan of ``jobs`` fails.

The statements are the ones the store really sends (captured as it sends them during a
claim, lease expiry and due promotion), explained on a table where most jobs have ended:
a claim that scans would read every finished job of its queue on every call.

- SQLite: ``EXPLAIN QUERY PLAN`` must name an index for ``jobs`` and need no temporary
  B-tree to sort (the order comes from the index, so ``LIMIT`` stops the walk).
- PostgreSQL: the statement is prepared and explained under ``force_generic_plan``, as
  the driver's prepared statements are after a few runs, with sequential scans priced out
  (``enable_seqscan = off``): a plan that still scans ``jobs`` cannot use the index at
  all, typically because its predicate is not implied by bound parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from coordinator.config import CoordinatorConfig
from coordinator.domain.states import JobState, Outcome
from coordinator.scheduler.due import promote_due
from coordinator.scheduler.leases import expire_leases
from coordinator.service.batch import WorkerOps
from coordinator.service.queues import QueueService
from coordinator.service.work import AttemptMessage, ClaimRequest, WorkBatch

from .harness import LEASE_MS, OPERATOR, QUEUE, WIRE, Harness, sent_statements

pytestmark = pytest.mark.perf

OTHER_QUEUE = "other"


def job_selects(sent: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The ordered, limited reads of ``jobs`` among ``sent`` (claims, expiry, due), and
    the probes of which queues hold claimable jobs (``EXISTS``, or ``LIMIT 1`` per queue)."""
    return [
        (sql, params)
        for sql, params in sent
        if re.match(r"\s*SELECT", sql)
        and re.search(r"\bFROM jobs\b", sql)
        and ("LIMIT" in sql.upper() or "EXISTS" in sql.upper())
    ]


def sqlite_plan(url: str, sql: str, params: Any) -> list[str]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params).all()
            return [str(row[-1]) for row in rows]
    finally:
        engine.dispose()


def postgres_plan(url: str, sql: str, params: dict[str, Any]) -> list[str]:
    """The generic plan's node descriptions: ``Seq Scan on jobs``, ``Index Scan using ...``."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        names.append(match.group(1))
        return f"${len(names)}"

    prepared = re.sub(r"%\((\w+)\)s", numbered, sql)
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            conn.exec_driver_sql("SET enable_seqscan = off")
            conn.exec_driver_sql(f"PREPARE hot AS {prepared}")
            # EXECUTE takes its arguments as literals, not as bound parameters.
            arguments = ", ".join(_literal(params[name]) for name in names)
            explained = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) EXECUTE hot({arguments})").scalar()
            conn.rollback()
    finally:
        engine.dispose()
    plan = explained if isinstance(explained, list) else json.loads(explained)
    return list(_nodes(plan[0]["Plan"]))


def _literal(value: Any) -> str:
    if isinstance(value, bool | int):
        return str(int(value))
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(map(_literal, value)) + "]"
    assert isinstance(value, str), value
    return "'" + value.replace("'", "''") + "'"


def _nodes(node: dict[str, Any]) -> Iterator[str]:
    relation = node.get("Relation Name")
    index = node.get("Index Name")
    yield " ".join(p for p in (node["Node Type"], f"on {relation}" if relation else "", index or "") if p)
    for child in node.get("Plans", []):
        yield from _nodes(child)


def assert_uses_index(harness: Harness, sql: str, params: Any) -> list[str]:
    """Fails unless the plan of ``sql`` reads ``jobs`` through an index; returns the plan."""
    if harness.store.postgres:
        nodes = postgres_plan(harness.store.url, sql, params)
        assert not [n for n in nodes if n.startswith("Seq Scan on jobs")], (sql, nodes)
        assert [n for n in nodes if "ix_jobs_" in n], (sql, nodes)
        return nodes
    lines = sqlite_plan(harness.store.url, sql, params)
    assert not [line for line in lines if re.match(r"SCAN jobs\b(?! USING)", line)], (sql, lines)
    assert not [line for line in lines if "TEMP B-TREE" in line], (sql, lines)
    assert [line for line in lines if "jobs USING" in line and "INDEX" in line], (sql, lines)
    return lines


@pytest.fixture
def mostly_finished(harness: Harness) -> Harness:
    """Two queues; most of their jobs ended, a few waiting, one running, one scheduled."""
    for queue in (QUEUE, OTHER_QUEUE):
        for _ in range(40):
            harness.enqueue(queue=queue)
        for _ in range(30):
            claimed = harness.run(queues=(queue,))
            harness.report(claimed.attempt_id, Outcome.SUCCEEDED)
        harness.run(queues=(queue,))
    harness.enqueue(run_at_ms=harness.clock.now_ms() + 60_000)
    return harness


@pytest.mark.parametrize("queues", [(QUEUE,), (QUEUE, OTHER_QUEUE)], ids=["one queue", "two queues"])
def test_a_claim_walks_the_claim_index(mostly_finished: Harness, queues: tuple[str, ...]) -> None:
    with sent_statements() as sent:
        claimed = mostly_finished.claim(3, queues=queues)
    assert len(claimed) == 3
    selects = job_selects(sent)
    walks = [(sql, params) for sql, params in selects if "ORDER BY" in sql]
    assert len(walks) == len(queues), selects  # one ordered walk per queue holding work
    # A claim naming several queues first asks which of them hold work at all: one
    # statement, an index probe per queue.
    assert len(selects) == len(walks) + (len(queues) > 1), selects
    for sql, params in selects:
        assert_uses_index(mostly_finished, sql, params)


def test_claims_of_one_queue_in_one_batch_walk_the_claim_index(mostly_finished: Harness) -> None:
    """The second claim reads past the jobs the first was handed (not written yet)."""
    requests = [ClaimRequest(f"w{n}", (QUEUE,), (WIRE,), 2, LEASE_MS) for n in range(2)]
    with sent_statements() as sent:
        answers = mostly_finished.ops.process(WorkBatch(claims=requests))
    assert [len(claimed) for claimed in answers.claims] == [2, 2]
    walks = [(sql, params) for sql, params in job_selects(sent) if "ORDER BY" in sql]
    assert len(walks) == 2, walks  # on PostgreSQL the first comes with the queue's controls
    for sql, params in walks:
        assert_uses_index(mostly_finished, sql, params)


@pytest.mark.parametrize("operation", [expire_leases, promote_due], ids=["expire_leases", "promote_due"])
def test_maintenance_walks_its_index(mostly_finished: Harness, operation: Callable[[WorkerOps], Any]) -> None:
    mostly_finished.clock.advance(LEASE_MS + 60_000)  # leases lapsed, the scheduled job due
    with sent_statements() as sent:
        operation(mostly_finished.ops)
    selects = job_selects(sent)
    assert selects, sent
    for sql, params in selects:
        assert_uses_index(mostly_finished, sql, params)


def test_a_limited_queue_counts_its_leased_jobs_from_their_partial_index(mostly_finished: Harness) -> None:
    """R-17: a claim from a queue with a concurrency limit counts the queue's reserved and
    running jobs first; that count reads the partial index of leased jobs, never the
    queue's ended jobs."""
    QueueService(mostly_finished.store, mostly_finished.clock, CoordinatorConfig()).set_limit(
        QUEUE, 5, OPERATOR
    )
    with sent_statements() as sent:
        claimed = mostly_finished.claim(3)
    assert len(claimed) == 3  # one of the queue's jobs runs already: room for four more
    counts = [(sql, params) for sql, params in job_selects(sent) if "count(" in sql.lower()]
    assert len(counts) == 1, sent
    plan = assert_uses_index(mostly_finished, *counts[0])
    # Each partial index of leased jobs holds none of the ended ones; on a table this
    # small, which of them PostgreSQL's planner picks turns on its statistics.
    leased = ("ix_jobs_leased", "ix_jobs_queue_key_leased")
    assert [line for line in plan if any(name in line for name in leased)], plan


@pytest.mark.parametrize("state", [s for s in JobState if s.terminal], ids=lambda s: s.value)
def test_retention_walks_the_finished_index_of_the_state_it_purges(
    mostly_finished: Harness, state: JobState
) -> None:
    """R-19: a purge reads the oldest jobs of one terminal state from that state's own
    index, in finish order: no scan of every job in the state, and no sort."""
    mostly_finished.clock.advance(60_000)
    with sent_statements() as sent:
        mostly_finished.store.transact(lambda tx: tx.purge(state, mostly_finished.clock.now_ms(), 5))
    selects = job_selects(sent)
    assert len(selects) == 1, sent
    plan = assert_uses_index(mostly_finished, *selects[0])
    assert [line for line in plan if f"ix_jobs_{state.value}_at" in line], plan


def test_a_start_finds_its_attempts_and_their_jobs_by_primary_key(mostly_finished: Harness) -> None:
    """A batch of starts reads its attempts and their jobs by key (PostgreSQL in one
    joined statement, SQLite in two): neither table is scanned, however many attempts
    and jobs have ended."""
    claimed = mostly_finished.claim(2)
    starts = [AttemptMessage(c.attempt_id, mostly_finished.holder(c.attempt_id)) for c in claimed]
    with sent_statements() as sent:
        answers = mostly_finished.ops.process(WorkBatch(starts=starts)).starts
    assert [answer.granted for answer in answers] == [True, True]
    reads = [(sql, params) for sql, params in sent if re.match(r"\s*SELECT", sql)]
    if mostly_finished.store.postgres:
        [(sql, params)] = reads
        nodes = postgres_plan(mostly_finished.store.url, sql, params)
        assert not [n for n in nodes if n.startswith("Seq Scan")], nodes
        scanned = {m.group(1) for n in nodes if (m := re.search(r"Scan on (\w+)", n))}
        assert scanned == {"jobs", "attempts"}, nodes
        return
    lines = [line for sql, params in reads for line in sqlite_plan(mostly_finished.store.url, sql, params)]
    assert len(reads) == 2, reads
    assert not [line for line in lines if re.match(r"SCAN ", line)], lines
    searched = {m.group(1) for line in lines if (m := re.match(r"SEARCH (\w+) USING", line))}
    assert searched == {"jobs", "attempts"}, lines


@pytest.mark.parametrize("control", ["key limit", "per-key rate"])
def test_a_per_key_controlled_queue_counts_its_keys_from_the_leased_index(
    mostly_finished: Harness, control: str
) -> None:
    """A claim from a queue with a per-key limit (each key's reserved and running jobs) or
    a per-key rate (each key's reserved jobs) counts them from the partial index of leased
    jobs by queue, key and state, never from the queue's ended jobs."""
    queues = QueueService(mostly_finished.store, mostly_finished.clock, CoordinatorConfig())
    if control == "key limit":
        queues.set_key_limit(QUEUE, 5, OPERATOR)
    else:
        queues.set_rate(QUEUE, 100, 60_000, True, OPERATOR)
    with sent_statements() as sent:
        claimed = mostly_finished.claim(3)
    assert len(claimed) == 3
    counts = [
        (sql, params)
        for sql, params in sent
        if re.search(r"\bFROM jobs\b", sql) and re.search(r"GROUP BY (jobs\.)?concurrency_key", sql)
    ]
    assert len(counts) == 1, sent
    plan = assert_uses_index(mostly_finished, *counts[0])
    assert [line for line in plan if "ix_jobs_queue_key_leased" in line], plan
