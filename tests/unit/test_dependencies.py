"""The pure rules of job dependencies (R-15) and the SDK's job IDs for workflows."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.dependencies import DependencyCycle, insertion_order, start_with_parents
from coordinator.domain.states import JobState
from worker_sdk import new_job_id

NOW = 1_000_000


@pytest.mark.parametrize(
    ("parents", "state", "failed_parent"),
    [
        ({"p": JobState.SUCCEEDED}, JobState.AVAILABLE, None),
        ({"p": JobState.SUCCEEDED, "q": JobState.RUNNING}, JobState.WAITING, None),
        ({"p": JobState.WAITING}, JobState.WAITING, None),
        ({"p": JobState.SUCCEEDED, "q": JobState.FAILED}, JobState.FAILED, "q"),
        ({"p": JobState.CANCELLED, "q": JobState.RUNNING}, JobState.FAILED, "p"),
    ],
)
def test_a_job_starts_by_its_parents_states(
    parents: dict[str, JobState], state: JobState, failed_parent: str | None
) -> None:
    start = start_with_parents(parents, NOW, NOW)
    assert (start.state, start.failed_parent) == (state, failed_parent)


def test_a_job_whose_parents_all_succeeded_honours_its_run_at() -> None:
    assert start_with_parents({"p": JobState.SUCCEEDED}, NOW + 1, NOW).state is JobState.SCHEDULED


def test_the_insertion_order_puts_parents_first() -> None:
    # 0 <- 1 <- 3, 0 <- 2 <- 3, listed children first
    assert insertion_order([[1, 2], [3], [3], []]) == [3, 1, 2, 0]


@pytest.mark.parametrize(
    ("edges", "cycle"),
    [([[0]], (0, 0)), ([[1], [0]], (0, 1, 0)), ([[1], [2], [0]], (0, 1, 2, 0))],
)
def test_a_cycle_is_named(edges: list[list[int]], cycle: tuple[int, ...]) -> None:
    with pytest.raises(DependencyCycle) as caught:
        insertion_order(edges)
    assert caught.value.cycle == cycle


@given(st.lists(st.lists(st.integers(0, 7), max_size=3), min_size=1, max_size=8))
def test_the_insertion_order_is_a_topological_order_or_a_cycle(raw: list[list[int]]) -> None:
    edges = [[parent for parent in parents if parent < len(raw)] for parents in raw]
    try:
        order = insertion_order(edges)
    except DependencyCycle as cycle:
        steps = cycle.cycle
        assert steps[0] == steps[-1]
        assert all(steps[i + 1] in edges[steps[i]] for i in range(len(steps) - 1))
        return
    assert sorted(order) == list(range(len(edges)))
    position = {index: n for n, index in enumerate(order)}
    assert all(position[parent] < position[child] for child in range(len(edges)) for parent in edges[child])


def test_new_job_ids_are_uuid7_and_time_ordered() -> None:
    ids = [new_job_id() for _ in range(50)]
    parsed = [uuid.UUID(value) for value in ids]
    assert all(value.version == 7 and value.variant == uuid.RFC_4122 for value in parsed)
    assert all(str(value) == text for value, text in zip(parsed, ids, strict=True))
    assert len(set(ids)) == 50
    stamps = [value.int >> 80 for value in parsed]
    assert stamps == sorted(stamps)
