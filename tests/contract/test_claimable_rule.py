"""R-17: what a claim may take is one rule, ``domain.states.is_claimable``, and every copy
of it agrees with it on both engines: the SQL text the store's statements state
(``CLAIMABLE_PREDICATE``), the predicates of the partial indexes in the live schema, the
store's claim over committed rows, and its claim over rows inserted in its own
transaction (read back from the database on both engines: no copy in Python).

Every job state, each with a run-at already due and one not due yet, is tried. The
leased states (reserved, running) are one rule in the same way: every partial index of
leased jobs in the live schema holds exactly the jobs ``LEASED_STATES`` names."""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from coordinator.domain.records import JobRecord
from coordinator.domain.states import CLAIMABLE_STATES, LEASED_STATES, JobState, is_claimable
from coordinator.store import Store
from coordinator.store.claims import ClaimWanted
from coordinator.store.schema import CLAIMABLE_PREDICATE, LEASED_PREDICATE

from .harness import SECOND, WIRE, Harness

CASES = [(state, due) for state in JobState for due in (True, False)]
"""Every state, due and not due."""
CLAIM_INDEXES = ("ix_jobs_claim", "ix_jobs_due", "ix_jobs_claim_turns")
"""The partial indexes over claimable jobs."""
LEASED_INDEXES = ("ix_jobs_leased", "ix_jobs_queue_key_leased")
"""The partial indexes over leased (reserved and running) jobs."""


def _jobs_in_every_state(harness: Harness, queue: str) -> list[JobRecord]:
    """One job record per case, not yet stored, in ``queue`` (the enqueued template's
    fields, each with its own ID, state and run-at)."""
    template = harness.job(harness.enqueue(queue=f"{queue}-template"))
    now = harness.clock.now_ms()
    return [
        dataclasses.replace(
            template,
            id=str(uuid.uuid4()),
            queue=queue,
            state=state,
            run_at_ms=now - SECOND if due else now + 60 * SECOND,
        )
        for state, due in CASES
    ]


def _expected(records: list[JobRecord], now_ms: int) -> set[str]:
    expected = {job.id for job in records if is_claimable(job.state, job.run_at_ms, now_ms)}
    # The domain's rule itself: the claimable states, due.
    assert expected == {
        job.id for job in records if job.state in CLAIMABLE_STATES and job.run_at_ms <= now_ms
    }
    assert len(expected) == len(CLAIMABLE_STATES)  # one due job per claimable state
    return expected


def _index_predicates(engine: Engine, names: tuple[str, ...]) -> dict[str, str]:
    """The WHERE clause of each of the indexes ``names``, as the live database holds it."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            rows = conn.execute(
                text(
                    "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i "
                    "JOIN pg_class AS c ON c.oid = i.indexrelid WHERE c.relname = ANY(:names)"
                ),
                {"names": list(names)},
            ).all()
            return {name: predicate for name, predicate in rows}
        query = text("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN :names")
        named = query.bindparams(bindparam("names", expanding=True))
        rows = conn.execute(named, {"names": list(names)}).all()
        return {name: re.split(r"\bWHERE\b", sql, maxsplit=1, flags=re.IGNORECASE)[1] for name, sql in rows}


def _matching(engine: Engine, predicate: str, queue: str, now_ms: int | None) -> set[str]:
    """The jobs of ``queue`` that ``predicate`` (SQL text) selects, and being due by
    ``now_ms`` unless it is None."""
    due = "" if now_ms is None else " AND run_at_ms <= :now_ms"
    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT id FROM jobs WHERE queue = :queue AND ({predicate}){due}"),
            {"queue": queue, "now_ms": now_ms},
        )
        return {row[0] for row in rows}


def _assert_every_copy_selects(
    engine: Engine, stated: str, indexes: tuple[str, ...], queue: str, now_ms: int | None, expected: set[str]
) -> None:
    """The predicate the store's statements state and that of each of ``indexes`` in the
    live schema select exactly ``expected`` of ``queue``'s jobs (due by ``now_ms`` unless
    it is None)."""
    assert _matching(engine, stated, queue, now_ms) == expected
    predicates = _index_predicates(engine, indexes)
    assert set(predicates) == set(indexes)
    for name, predicate in predicates.items():
        assert _matching(engine, predicate, queue, now_ms) == expected, name
        if engine.dialect.name == "sqlite":
            # SQLite uses a partial index only for a query that states its predicate
            # word for word, as the store's statements state ``stated``.
            assert predicate.strip() == stated, name


@pytest.fixture
def engine(store: Store) -> Iterator[Engine]:
    plain = create_engine(store.url, poolclass=NullPool)
    yield plain
    plain.dispose()


def test_every_copy_of_the_claimable_rule_agrees_with_the_domain(harness: Harness, engine: Engine) -> None:
    queue = "rule-committed"
    records = _jobs_in_every_state(harness, queue)
    now = harness.clock.now_ms()
    expected = _expected(records, now)
    with harness.store.write() as tx:
        tx.insert_jobs(records, now)

    _assert_every_copy_selects(engine, CLAIMABLE_PREDICATE, CLAIM_INDEXES, queue, now, expected)
    with harness.store.write() as tx:
        (found,) = tx.claim([ClaimWanted((queue,), (WIRE,), len(records))], now)
        assert {job.id for job in found.jobs} == expected
        assert found.drained


def test_every_index_of_leased_jobs_holds_exactly_the_leased_states(harness: Harness, engine: Engine) -> None:
    """The leased indexes' predicates are written out in the migrations that made them;
    each must select the jobs in ``LEASED_STATES``, no more and no fewer, as the text the
    store's statements state (``LEASED_PREDICATE``) does."""
    queue = "rule-leased"
    records = _jobs_in_every_state(harness, queue)
    now = harness.clock.now_ms()
    expected = {job.id for job in records if job.state in LEASED_STATES}
    assert len(expected) == 2 * len(LEASED_STATES)  # each leased state, due and not due
    with harness.store.write() as tx:
        tx.insert_jobs(records, now)

    _assert_every_copy_selects(engine, LEASED_PREDICATE, LEASED_INDEXES, queue, None, expected)


def test_a_claim_of_rows_inserted_in_its_own_transaction_keeps_the_same_rule(harness: Harness) -> None:
    """The claim reads them back on both engines (PostgreSQL sends the held insert
    first), so the SQL copy of the rule decides for them too."""
    queue = "rule-held"
    records = _jobs_in_every_state(harness, queue)
    now = harness.clock.now_ms()
    expected = _expected(records, now)
    with harness.store.write() as tx:
        tx.insert_jobs(records, now, ids_made_here=True)
        (found,) = tx.claim([ClaimWanted((queue,), (WIRE,), len(records))], now)
        assert {job.id for job in found.jobs} == expected
