"""Job dependencies (R-15, R-16): when a child may run, when it fails unrun, and the
order a batch that declares its own parents is inserted in.

A child waits until every parent succeeded; the last parent's success releases it in
the same transaction. A parent that ends failed or cancelled fails its waiting
descendants with ``parent_failed``, transitively, without running them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coordinator.domain.lifecycle import initial_state
from coordinator.domain.states import JobState


class DependencyCycle(ValueError):
    """Jobs of one batch name each other as parents, directly or through others."""

    def __init__(self, cycle: Sequence[int]) -> None:
        super().__init__(" -> ".join(f"jobs[{index}]" for index in cycle))
        self.cycle = tuple(cycle)


@dataclass(frozen=True, slots=True)
class Start:
    """How a new (or re-opened) job with parents begins."""

    state: JobState
    failed_parent: str | None = None
    """With ``state`` failed: a parent that failed or was cancelled."""


def start_with_parents(parent_states: Mapping[str, JobState], run_at_ms: int, now_ms: int) -> Start:
    """A job whose parents are in ``parent_states``: it fails at once under a parent that
    failed or was cancelled, waits while any has still to succeed, and otherwise starts
    as a job without parents would (available, or scheduled for its run-at)."""
    for parent_id, state in sorted(parent_states.items()):
        if state in (JobState.FAILED, JobState.CANCELLED):
            return Start(JobState.FAILED, failed_parent=parent_id)
    if any(state is not JobState.SUCCEEDED for state in parent_states.values()):
        return Start(JobState.WAITING)
    return Start(initial_state(run_at_ms, now_ms))


def released_state(run_at_ms: int, now_ms: int) -> JobState:
    """A waiting child whose last parent just succeeded."""
    return initial_state(run_at_ms, now_ms)


def insertion_order(parents_by_index: Sequence[Iterable[int]]) -> list[int]:
    """The indexes of a batch so that each job comes after the parents it names inside
    the batch (a depth-first topological sort). Raises DependencyCycle naming a cycle."""
    order: list[int] = []
    done: set[int] = set()
    path: list[int] = []
    on_path: set[int] = set()
    edges = [sorted(set(parents)) for parents in parents_by_index]

    def visit(index: int) -> None:
        if index in done:
            return
        if index in on_path:
            raise DependencyCycle([*path[path.index(index) :], index])
        path.append(index)
        on_path.add(index)
        for parent in edges[index]:
            visit(parent)
        path.pop()
        on_path.discard(index)
        done.add(index)
        order.append(index)

    for index in range(len(edges)):
        visit(index)
    return order
