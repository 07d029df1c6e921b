"""The write half of an enqueue: one transaction that inserts a batch of new jobs with
their dependencies (R-15), honouring idempotency keys (R-14) and unique keys (one
unfinished job per wire name and key: a repeat returns it).

A job's parents are existing jobs or jobs of the same batch (named by their
client-chosen IDs), so a whole workflow is one all-or-nothing call. Existing parents
are read locked: a parent cannot end between our reading its state and our commit, so
a child never waits on a parent that already succeeded.

Queues are the tenancy boundary (docs/security.md): keys are per queue, and an existing
parent outside the queues the caller may reach is refused as if it did not exist.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.domain.dependencies import start_with_parents
from coordinator.domain.records import Dependency, Enqueued, JobRecord
from coordinator.domain.states import CODE_PARENT_FAILED, JobState
from coordinator.errors import AlreadyExists, NotFound
from coordinator.store import Tx


@dataclass(frozen=True, slots=True)
class NewJob:
    """A checked job to insert, with the parents it named (de-duplicated)."""

    index: int
    record: JobRecord
    parent_ids: tuple[str, ...]
    chosen_id: bool
    """The client chose the ID (it must not exist yet)."""


def insert_batch(
    tx: Tx,
    batch: Sequence[NewJob],
    order: Sequence[int],
    now_ms: int,
    reachable: Collection[str] | None = None,
) -> list[Enqueued]:
    """Inserts ``batch`` (in ``order``: parents of the batch before their children) and
    returns what became of each job, in batch order. ``reachable``: the queues whose
    existing jobs the caller may name as parents (None: any; the batch's own jobs were
    checked to be in them already)."""
    keys = [_keyed(job.record) for job in batch if job.record.idempotency_key]
    existing_by_key = tx.jobs_by_idempotency_keys(key for key in keys if key is not None)
    unique = [_unique(job.record) for job in batch if job.record.unique_key]
    unfinished_by_unique = tx.unfinished_by_unique_keys(key for key in unique if key is not None)
    _check_chosen_ids_free(tx, batch)
    batch_ids = {job.record.id: job.record.queue for job in batch}
    external = {parent for job in batch for parent in job.parent_ids if parent not in batch_ids}
    parents = tx.jobs_by_ids(external)
    _check_parents_found(batch, parents, batch_ids, reachable)
    results: dict[int, Enqueued] = {}
    taken: dict[tuple[str, str], JobRecord] = {}
    taken_unique: dict[tuple[str, str, str], JobRecord] = {}
    states: dict[str, JobState] = {job_id: parent.state for job_id, parent in parents.items()}
    fresh: list[JobRecord] = []
    edges: list[Dependency] = []
    for position in order:
        job = batch[position]
        key, unique_key = _keyed(job.record), _unique(job.record)
        same = (existing_by_key.get(key) or taken.get(key)) if key is not None else None
        if same is None and unique_key is not None:
            same = unfinished_by_unique.get(unique_key) or taken_unique.get(unique_key)
        if same is not None:
            results[job.index] = Enqueued(same.id, same.state, existing=True)
            states[job.record.id] = same.state
            continue
        record = _with_parents(job, states, now_ms)
        if key is not None:
            taken[key] = record
        if unique_key is not None and not record.state.terminal:
            taken_unique[unique_key] = record
        states[record.id] = record.state
        fresh.append(record)
        edges += [_edge(record.id, p, parents.get(p), batch_ids.get(p)) for p in job.parent_ids]
        results[job.index] = Enqueued(record.id, record.state, existing=False)
    tx.register_queues({record.queue for record in fresh}, now_ms)
    tx.mark_keyed_queues({record.queue for record in fresh if record.concurrency_key})
    tx.insert_jobs(fresh, now_ms, ids_made_here=not any(job.chosen_id for job in batch))
    tx.insert_dependencies(edges)
    available = [record.id for record in fresh if record.state is JobState.AVAILABLE]
    if available:
        tx.notify_jobs_available(available)
    return [results[job.index] for job in batch]


def _check_parents_found(
    batch: Sequence[NewJob],
    parents: Mapping[str, JobRecord],
    batch_ids: Mapping[str, str],
    reachable: Collection[str] | None,
) -> None:
    """Raises NotFound for the first parent neither in the batch nor read (``parents``)
    in a queue the caller may reach."""
    for job in batch:
        for parent_id in job.parent_ids:
            parent = parents.get(parent_id)
            if parent_id not in batch_ids and (parent is None or not _may_reach(reachable, parent.queue)):
                # A parent in a queue the caller may not reach is refused in the same words
                # as a missing one: the answer must not tell that it exists.
                raise NotFound(
                    f"jobs[{job.index}]: parent {parent_id} does not exist (never enqueued, or removed "
                    "by retention); nothing was enqueued",
                    reason="PARENT_NOT_FOUND",
                    metadata={"index": job.index, "job_id": parent_id},
                )


def _keyed(record: JobRecord) -> tuple[str, str] | None:
    """An idempotency key names a job within its queue only."""
    return (record.queue, record.idempotency_key) if record.idempotency_key else None


def _unique(record: JobRecord) -> tuple[str, str, str] | None:
    return (record.queue, record.wire_name, record.unique_key) if record.unique_key else None


def _may_reach(reachable: Collection[str] | None, queue: str) -> bool:
    return reachable is None or queue in reachable


def _with_parents(job: NewJob, states: dict[str, JobState], now_ms: int) -> JobRecord:
    if not job.parent_ids:
        return job.record
    start = start_with_parents({p: states[p] for p in job.parent_ids}, job.record.run_at_ms, now_ms)
    if start.state is JobState.FAILED:
        # under a parent that already failed, the child ends at once, unrun.
        return replace(
            job.record, state=JobState.FAILED, finished_at_ms=now_ms, last_error_code=CODE_PARENT_FAILED
        )
    return replace(job.record, state=start.state)


def _edge(child_id: str, parent_id: str, parent: JobRecord | None, batch_queue: str | None) -> Dependency:
    """A parent of the batch (in ``batch_queue``) has not run yet; an existing one may
    have succeeded, and its output is copied now (R-16). Either way the row keeps the
    parent's queue, which decides who may receive that output."""
    if parent is None:
        return Dependency(child_id, parent_id, parent_queue=batch_queue)
    if parent.state is JobState.SUCCEEDED:
        return Dependency(
            child_id, parent_id, satisfied=True, parent_output=parent.output, parent_queue=parent.queue
        )
    return Dependency(child_id, parent_id, parent_queue=parent.queue)


def _check_chosen_ids_free(tx: Tx, batch: Sequence[NewJob]) -> None:
    chosen = {job.record.id: job for job in batch if job.chosen_id}
    for job_id in sorted(tx.job_states(chosen)):
        index = chosen[job_id].index
        raise AlreadyExists(
            f"jobs[{index}].job_id: job {job_id} exists already; choose a new ID, or leave it empty "
            "to let the coordinator choose",
            reason="JOB_ID_TAKEN",
            metadata={"index": index, "job_id": job_id},
        )
