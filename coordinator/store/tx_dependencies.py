"""A write transaction's dependency operations (R-15, R-16): the rows that tie a child
to its parents, and the parents' outputs copied onto them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from sqlalchemy import bindparam, insert, select, update

from coordinator.domain.records import Dependency, JobRecord
from coordinator.domain.states import CODE_PARENT_FAILED, JobState
from coordinator.store.prepared import Prepared
from coordinator.store.rows import dependency_row, jobs_from
from coordinator.store.schema import dependencies, jobs
from coordinator.store.tx_base import Lockable, TxBase, chunks

# The reads every claim and every success make, built once (see ``tx_base.Lockable``).
_WAITING_CHILDREN = Lockable(
    select(dependencies.c.parent_id, jobs)
    .join(jobs, dependencies.c.child_id == jobs.c.id)
    .where(
        dependencies.c.parent_id.in_(bindparam("parent_ids", expanding=True)),
        jobs.c.state == JobState.WAITING.value,
    )
    .order_by(jobs.c.id)
)
_PARENTS_WITH_CHILDREN = Prepared(
    select(dependencies.c.parent_id)
    .where(dependencies.c.parent_id.in_(bindparam("parent_ids", expanding=True)))
    .distinct()
)
_SATISFY = Prepared(
    update(dependencies)
    .where(dependencies.c.parent_id == bindparam("p"))
    .values(satisfied=True, parent_output=bindparam("o"))
)
_PARENT_OUTPUTS = Prepared(
    select(
        dependencies.c.child_id,
        dependencies.c.parent_id,
        dependencies.c.parent_output,
        dependencies.c.parent_queue,
        jobs.c.traceparent,
        jobs.c.tracestate,
    )
    # Outer: a parent removed by retention still hands on its output (kept on the row).
    .select_from(dependencies.outerjoin(jobs, jobs.c.id == dependencies.c.parent_id))
    .where(dependencies.c.child_id.in_(bindparam("child_ids", expanding=True)))
)
_INSERT_DEPENDENCIES = insert(dependencies)


class ParentOutput(NamedTuple):
    output: bytes
    queue: str | None
    """The parent's queue; None on rows older than migration 0017 whose parent was gone."""
    traceparent: str | None = None
    """The trace context the parent was enqueued with (None: none, or the parent is gone)."""
    tracestate: str | None = None


class DependencyOps(TxBase):
    # -- dependencies (R-15, R-16) ----------------------------------------------------------

    def insert_dependencies(self, rows: Sequence[Dependency]) -> None:
        self._inserted_with_parents.update(row.child_id for row in rows)
        if rows:
            self._conn.execute(_INSERT_DEPENDENCIES, [dependency_row(row) for row in rows])

    def waiting_children(self, parent_ids: Iterable[str]) -> dict[str, list[JobRecord]]:
        """For each of ``parent_ids`` that has any, its children that wait, locked in ID
        order: one statement for all the parents a transaction ended."""
        found: dict[str, list[JobRecord]] = {}
        for chunk in chunks(sorted(set(parent_ids))):
            rows = self._read_locked(_WAITING_CHILDREN, {"parent_ids": chunk})
            # Column 0 is the parent's ID; the job's columns follow it.
            for parent_id, child in zip((row[0] for row in rows), jobs_from(rows), strict=True):
                found.setdefault(parent_id, []).append(child)
        return found

    def parents_with_children(self, parent_ids: Iterable[str]) -> list[str]:
        """Those of ``parent_ids`` that any child depends on, in ID order: one read for
        all the jobs a transaction ended, so ends without dependents (most) cost nothing
        more."""
        found: set[str] = set()
        for chunk in chunks(sorted(set(parent_ids))):
            found.update(_PARENTS_WITH_CHILDREN.execute(self._conn, {"parent_ids": chunk}).scalars())
        return sorted(found)

    def satisfy_dependencies(self, outputs: Mapping[str, bytes | None]) -> None:
        """Records that each parent of ``outputs`` (parents with children) succeeded,
        with its output, on every child's row."""
        if outputs:
            _SATISFY.executemany(
                self._conn, [{"p": parent_id, "o": output} for parent_id, output in outputs.items()]
            )

    def unsatisfied_parents(self, child_ids: Iterable[str]) -> dict[str, list[str]]:
        """For each of ``child_ids`` that has any, its parents that have not succeeded."""
        found: dict[str, list[str]] = {}
        for chunk in chunks(sorted(set(child_ids))):
            rows = self._conn.execute(
                select(dependencies.c.child_id, dependencies.c.parent_id)
                .where(dependencies.c.child_id.in_(chunk), dependencies.c.satisfied.is_(False))
                .order_by(dependencies.c.child_id, dependencies.c.parent_id)
            )
            for child_id, parent_id in rows:
                found.setdefault(child_id, []).append(parent_id)
        return found

    def parent_outputs(self, child_ids: Iterable[str]) -> dict[str, dict[str, ParentOutput]]:
        """The outputs of the parents of each of ``child_ids`` (R-16), with the queue
        each parent is in, for their claims. Jobs this transaction inserted without
        parents are not asked about: an enqueue that claims its own new jobs reads
        nothing here."""
        found: dict[str, dict[str, ParentOutput]] = {}
        orphans = self._inserted_jobs - self._inserted_with_parents
        for chunk in chunks(sorted(set(child_ids) - orphans)):
            rows = _PARENT_OUTPUTS.execute(self._conn, {"child_ids": chunk})
            for child_id, parent_id, output, queue, traceparent, tracestate in rows:
                kept = bytes(output) if output is not None else b""
                found.setdefault(child_id, {})[parent_id] = ParentOutput(kept, queue, traceparent, tracestate)
        return found

    def children_failed_by_parent(self, parent_id: str) -> list[JobRecord]:
        """The children of ``parent_id`` that ended ``parent_failed``, locked."""
        query = (
            select(jobs)
            .join(dependencies, dependencies.c.child_id == jobs.c.id)
            .where(
                dependencies.c.parent_id == parent_id,
                jobs.c.state == JobState.FAILED.value,
                jobs.c.last_error_code == CODE_PARENT_FAILED,
            )
            .order_by(jobs.c.id)
        )
        return list(jobs_from(self._conn.execute(self._locked(query))))

    def job_states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        """The states of those of ``job_ids`` that exist (no lock)."""
        found: dict[str, JobState] = {}
        for chunk in chunks(sorted(set(job_ids))):
            rows = self._conn.execute(select(jobs.c.id, jobs.c.state).where(jobs.c.id.in_(chunk)))
            found.update((job_id, JobState(state)) for job_id, state in rows)
        return found
