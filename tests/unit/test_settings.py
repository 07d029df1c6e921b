"""R-1..R-4, R-7: settings defaults, validation and precedence of the four levels (R-3)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.settings import (
    JobSettings,
    SettingsError,
    SettingsLayer,
    describe_ms,
    resolve_settings,
)

SECOND = 1_000
HOUR = 3_600 * SECOND
DAY = 24 * HOUR

LEVELS = ("job_defaults", "attribute", "fluent")

# Per field: a value for each level, all different from the library default and from
# each other, and each valid on its own over the library defaults (initial <= max).
LEVEL_VALUES: dict[str, tuple[int, int, int]] = {
    "max_executions": (4, 7, 11),
    "retry_initial_delay_ms": (1 * SECOND, 2 * SECOND, 3 * SECOND),
    "retry_max_delay_ms": (10 * SECOND, 20 * SECOND, 30 * SECOND),
    "execution_timeout_ms": (10 * 60 * SECOND, 2 * 60 * SECOND, 30 * SECOND),
    "max_unstarted_abandonments": (2, 8, 13),
    "unstarted_initial_delay_ms": (100, 200, 300),
    "unstarted_max_delay_ms": (2 * SECOND, 3 * SECOND, 4 * SECOND),
}


def test_r1_r2_r4_r7_library_defaults() -> None:
    """docs/retries.md: 3 executions; retry 5 s doubling to 60 s; no timeout; 5 unstarted, 1 s to 30 s."""
    settings = JobSettings()
    assert settings.max_executions == 3
    assert settings.retry_initial_delay_ms == 5 * SECOND
    assert settings.retry_max_delay_ms == 60 * SECOND
    assert settings.execution_timeout_ms is None
    assert settings.max_unstarted_abandonments == 5
    assert settings.unstarted_initial_delay_ms == 1 * SECOND
    assert settings.unstarted_max_delay_ms == 30 * SECOND
    assert settings.validate() is settings


def test_r3_no_layers_gives_the_library_defaults() -> None:
    assert resolve_settings() == JobSettings()
    assert resolve_settings(SettingsLayer(), SettingsLayer(), SettingsLayer()) == JobSettings()


def test_r3_level_values_cover_every_setting() -> None:
    """Guards the table below: a new setting must join the precedence tests."""
    names = {f.name for f in dataclasses.fields(JobSettings)}
    assert set(LEVEL_VALUES) == names
    layer_names = {f.name for f in dataclasses.fields(SettingsLayer)} - {"clear_execution_timeout"}
    assert layer_names == names


@pytest.mark.parametrize("field", sorted(LEVEL_VALUES))
@pytest.mark.parametrize(
    "levels_set",
    [combo for size in range(4) for combo in itertools.combinations(LEVELS, size)],
    ids=lambda combo: "+".join(combo) or "none",
)
def test_r3_precedence_default_then_job_defaults_then_attribute_then_fluent(
    field: str, levels_set: tuple[str, ...]
) -> None:
    """Later wins: library default < JobDefaults < attribute < fluent, for every field."""
    values = dict(zip(LEVELS, LEVEL_VALUES[field], strict=True))
    changes: list[dict[str, Any]] = [
        {field: values[level]} if level in levels_set else {} for level in LEVELS
    ]
    layers = [SettingsLayer(**change) for change in changes]
    resolved = resolve_settings(*layers)

    highest_set = [level for level in LEVELS if level in levels_set]
    expected = values[highest_set[-1]] if highest_set else getattr(JobSettings(), field)
    assert getattr(resolved, field) == expected
    # No other field moves.
    others = {f.name for f in dataclasses.fields(JobSettings)} - {field}
    assert all(getattr(resolved, name) == getattr(JobSettings(), name) for name in others)


def test_r3_each_level_contributes_its_own_fields() -> None:
    job_defaults = SettingsLayer(max_executions=4, execution_timeout_ms=10 * 60 * SECOND)
    attribute = SettingsLayer(max_executions=5)
    fluent = SettingsLayer(retry_initial_delay_ms=30 * SECOND, retry_max_delay_ms=10 * 60 * SECOND)
    resolved = resolve_settings(job_defaults, attribute, fluent)
    assert resolved == JobSettings(
        max_executions=5,
        retry_initial_delay_ms=30 * SECOND,
        retry_max_delay_ms=10 * 60 * SECOND,
        execution_timeout_ms=10 * 60 * SECOND,
    )


def test_r3_resolve_over_another_base() -> None:
    base = JobSettings(
        max_executions=10, retry_initial_delay_ms=2 * SECOND, retry_max_delay_ms=5 * 60 * SECOND
    )
    assert resolve_settings(base=base) == base
    assert resolve_settings(SettingsLayer(max_executions=2), base=base) == dataclasses.replace(
        base, max_executions=2
    )


def test_r3_resolved_settings_are_a_frozen_copy() -> None:
    """Copied onto the job at enqueue: the result cannot be changed afterwards."""
    resolved = resolve_settings(SettingsLayer(max_executions=5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.max_executions = 6  # type: ignore[misc]
    layer = SettingsLayer(max_executions=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.max_executions = 6  # type: ignore[misc]


# --- R-7 tri-state execution timeout ---------------------------------------------------

TEN_MINUTES = 10 * 60 * SECOND
TWO_MINUTES = 2 * 60 * SECOND


def test_r7_timeout_inherits_from_job_defaults() -> None:
    resolved = resolve_settings(
        SettingsLayer(execution_timeout_ms=TEN_MINUTES), SettingsLayer(), SettingsLayer()
    )
    assert resolved.execution_timeout_ms == TEN_MINUTES


def test_r7_timeout_set_per_job_overrides_job_defaults() -> None:
    resolved = resolve_settings(
        SettingsLayer(execution_timeout_ms=TEN_MINUTES),
        SettingsLayer(),
        SettingsLayer(execution_timeout_ms=TWO_MINUTES),
    )
    assert resolved.execution_timeout_ms == TWO_MINUTES


@pytest.mark.parametrize("clearing_level", ["attribute", "fluent"])
def test_r7_without_execution_timeout_clears_an_inherited_one(clearing_level: str) -> None:
    clear = SettingsLayer(clear_execution_timeout=True)
    attribute = clear if clearing_level == "attribute" else SettingsLayer()
    fluent = clear if clearing_level == "fluent" else SettingsLayer()
    resolved = resolve_settings(SettingsLayer(execution_timeout_ms=TEN_MINUTES), attribute, fluent)
    assert resolved.execution_timeout_ms is None


def test_r7_clear_over_a_library_default_of_none_stays_none() -> None:
    assert resolve_settings(SettingsLayer(clear_execution_timeout=True)).execution_timeout_ms is None


def test_r7_a_higher_level_may_set_a_timeout_again_after_a_clear() -> None:
    resolved = resolve_settings(
        SettingsLayer(execution_timeout_ms=TEN_MINUTES),
        SettingsLayer(clear_execution_timeout=True),
        SettingsLayer(execution_timeout_ms=TWO_MINUTES),
    )
    assert resolved.execution_timeout_ms == TWO_MINUTES


def test_r7_a_lower_level_timeout_does_not_undo_a_higher_clear() -> None:
    resolved = resolve_settings(
        SettingsLayer(execution_timeout_ms=TEN_MINUTES),
        SettingsLayer(execution_timeout_ms=TWO_MINUTES),
        SettingsLayer(clear_execution_timeout=True),
    )
    assert resolved.execution_timeout_ms is None


def test_r7_a_number_and_a_clear_in_one_layer_the_number_wins() -> None:
    both = SettingsLayer(execution_timeout_ms=TWO_MINUTES, clear_execution_timeout=True)
    assert resolve_settings(SettingsLayer(execution_timeout_ms=TEN_MINUTES), both).execution_timeout_ms == (
        TWO_MINUTES
    )
    merged = both.over(SettingsLayer(execution_timeout_ms=TEN_MINUTES))
    assert merged.execution_timeout_ms == TWO_MINUTES
    assert merged.clear_execution_timeout is False


# --- SettingsLayer.over: the client merges attribute and fluent before sending -----------


def test_r3_over_lets_the_upper_layer_win_field_by_field() -> None:
    attribute = SettingsLayer(max_executions=5, retry_max_delay_ms=90 * SECOND)
    fluent = SettingsLayer(max_executions=7, retry_initial_delay_ms=SECOND)
    assert fluent.over(attribute) == SettingsLayer(
        max_executions=7, retry_initial_delay_ms=SECOND, retry_max_delay_ms=90 * SECOND
    )


def test_r7_a_clear_survives_the_client_merge_and_beats_job_defaults() -> None:
    """The fluent ``without_execution_timeout`` is sent merged; JobDefaults' timeout must not return."""
    attribute = SettingsLayer(max_executions=5, execution_timeout_ms=TWO_MINUTES)
    fluent = SettingsLayer(clear_execution_timeout=True)
    merged = fluent.over(attribute)
    assert merged.execution_timeout_ms is None
    assert merged.clear_execution_timeout is True
    resolved = resolve_settings(SettingsLayer(execution_timeout_ms=TEN_MINUTES), merged)
    assert resolved.execution_timeout_ms is None
    assert resolved.max_executions == 5


def test_r7_a_clear_in_the_attribute_survives_an_empty_fluent_layer() -> None:
    merged = SettingsLayer().over(SettingsLayer(clear_execution_timeout=True))
    assert merged.clear_execution_timeout is True
    assert (
        resolve_settings(SettingsLayer(execution_timeout_ms=TEN_MINUTES), merged).execution_timeout_ms is None
    )


def test_r7_a_fluent_timeout_replaces_an_attribute_clear_in_the_merge() -> None:
    merged = SettingsLayer(execution_timeout_ms=TWO_MINUTES).over(SettingsLayer(clear_execution_timeout=True))
    assert merged.clear_execution_timeout is False
    assert resolve_settings(SettingsLayer(execution_timeout_ms=TEN_MINUTES), merged).execution_timeout_ms == (
        TWO_MINUTES
    )


def _maybe(values: st.SearchStrategy[int]) -> st.SearchStrategy[int | None]:
    return st.none() | values


delays = st.integers(min_value=1, max_value=DAY)
layers = st.builds(
    SettingsLayer,
    max_executions=_maybe(st.integers(min_value=1, max_value=100)),
    retry_initial_delay_ms=_maybe(delays),
    retry_max_delay_ms=_maybe(delays),
    execution_timeout_ms=_maybe(st.integers(min_value=1, max_value=30 * DAY)),
    clear_execution_timeout=st.booleans(),
    max_unstarted_abandonments=_maybe(st.integers(min_value=1, max_value=100)),
    unstarted_initial_delay_ms=_maybe(delays),
    unstarted_max_delay_ms=_maybe(delays),
)


def _resolve(*stack: SettingsLayer) -> JobSettings | str:
    try:
        return resolve_settings(*stack)
    except SettingsError as error:
        return error.field


@given(job_defaults=layers, attribute=layers, fluent=layers)
def test_r3_merging_attribute_and_fluent_first_changes_nothing(
    job_defaults: SettingsLayer, attribute: SettingsLayer, fluent: SettingsLayer
) -> None:
    """The client sends ``fluent.over(attribute)``; the coordinator lays it over JobDefaults.

    That must give what resolving the three levels one by one gives.
    """
    assert _resolve(job_defaults, fluent.over(attribute)) == _resolve(job_defaults, attribute, fluent)
    assert _resolve(fluent.over(attribute).over(job_defaults)) == _resolve(job_defaults, attribute, fluent)


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_executions": 0}, "max_executions"),
        ({"max_executions": 101}, "max_executions"),
        ({"max_executions": -1}, "max_executions"),
        ({"max_unstarted_abandonments": 0}, "max_unstarted_abandonments"),
        ({"max_unstarted_abandonments": 101}, "max_unstarted_abandonments"),
        ({"retry_initial_delay_ms": 0}, "retry_initial_delay"),
        ({"retry_initial_delay_ms": -5}, "retry_initial_delay"),
        ({"retry_initial_delay_ms": DAY + 1, "retry_max_delay_ms": DAY}, "retry_initial_delay"),
        ({"retry_max_delay_ms": 0}, "retry_max_delay"),
        ({"retry_max_delay_ms": DAY + 1}, "retry_max_delay"),
        ({"retry_initial_delay_ms": 60 * SECOND + 1}, "retry_initial_delay"),  # initial > max
        ({"retry_initial_delay_ms": 10 * SECOND, "retry_max_delay_ms": 9 * SECOND}, "retry_initial_delay"),
        ({"unstarted_initial_delay_ms": 0}, "unstarted_initial_delay"),
        ({"unstarted_initial_delay_ms": DAY + 1, "unstarted_max_delay_ms": DAY}, "unstarted_initial_delay"),
        ({"unstarted_max_delay_ms": 0}, "unstarted_max_delay"),
        ({"unstarted_max_delay_ms": DAY + 1}, "unstarted_max_delay"),
        ({"unstarted_initial_delay_ms": 30 * SECOND + 1}, "unstarted_initial_delay"),  # initial > max
        ({"execution_timeout_ms": 0}, "execution_timeout"),
        ({"execution_timeout_ms": -1}, "execution_timeout"),
        ({"execution_timeout_ms": 30 * DAY + 1}, "execution_timeout"),
    ],
)
def test_r1_r2_r4_r7_out_of_range_settings_are_refused_naming_the_field(
    changes: dict[str, int], field: str
) -> None:
    """``field`` uses the wire name of the setting (runwick.v1.JobSettings)."""
    with pytest.raises(SettingsError) as direct:
        JobSettings(**changes).validate()
    assert direct.value.field == field
    assert isinstance(direct.value, ValueError)
    assert str(direct.value).startswith(f"{field}: ")

    with pytest.raises(SettingsError) as layered:
        resolve_settings(SettingsLayer(**changes))  # type: ignore[arg-type]
    assert layered.value.field == field


def test_r2_error_message_names_the_offending_value() -> None:
    with pytest.raises(SettingsError, match="86400001"):
        JobSettings(retry_max_delay_ms=DAY + 1).validate()
    with pytest.raises(SettingsError, match="101"):
        JobSettings(max_executions=101).validate()


@pytest.mark.parametrize(
    "changes",
    [
        {"max_executions": 1},
        {"max_executions": 100},
        {"max_unstarted_abandonments": 1},
        {"max_unstarted_abandonments": 100},
        {"retry_initial_delay_ms": 1, "retry_max_delay_ms": 1},
        {"retry_initial_delay_ms": DAY, "retry_max_delay_ms": DAY},
        {"retry_initial_delay_ms": 60 * SECOND},  # initial == max
        {"unstarted_initial_delay_ms": 1, "unstarted_max_delay_ms": 1},
        {"unstarted_initial_delay_ms": DAY, "unstarted_max_delay_ms": DAY},
        {"execution_timeout_ms": 1},
        {"execution_timeout_ms": 30 * DAY},
        {"execution_timeout_ms": None},
    ],
)
def test_r1_r2_r4_r7_range_bounds_are_accepted(changes: dict[str, int | None]) -> None:
    settings = JobSettings(**changes)  # type: ignore[arg-type]
    assert settings.validate() is settings
    assert resolve_settings(SettingsLayer(**changes)) == settings  # type: ignore[arg-type]


def test_r3_a_valid_level_cannot_hide_an_invalid_lower_level_value_it_does_not_override() -> None:
    """JobDefaults sets max 4 s; the fluent initial of 5 s (default) is then above it."""
    with pytest.raises(SettingsError) as error:
        resolve_settings(SettingsLayer(retry_max_delay_ms=4 * SECOND))
    assert error.value.field == "retry_initial_delay"


def test_r3_validation_applies_to_the_resolved_result_not_each_layer() -> None:
    """Initial 90 s over the 60 s default max is fine once a higher level raises the max."""
    resolved = resolve_settings(
        SettingsLayer(retry_initial_delay_ms=90 * SECOND), SettingsLayer(retry_max_delay_ms=5 * 60 * SECOND)
    )
    assert (resolved.retry_initial_delay_ms, resolved.retry_max_delay_ms) == (90 * SECOND, 5 * 60 * SECOND)


@pytest.mark.parametrize(
    ("ms", "text"), [(100, "100 ms"), (1, "1 ms"), (5 * SECOND, "5 s"), (90 * SECOND, "90 s"), (DAY, "24 h")]
)
def test_a_bound_is_described_in_the_largest_unit_it_is_whole_in(ms: int, text: str) -> None:
    assert describe_ms(ms) == text


def test_a_lease_out_of_range_is_refused_with_the_bounds_it_is_checked_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The message is derived from ``LEASE_RANGE_MS``: a changed bound changes it."""
    from google.protobuf.duration_pb2 import Duration

    from coordinator.api import worker_servicer
    from coordinator.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"must be 100 ms to 24 h, got 50 ms"):
        worker_servicer._lease_ms(Duration(nanos=50_000_000), "hello.lease")
    monkeypatch.setattr(worker_servicer, "LEASE_RANGE_MS", (5 * SECOND, 2 * HOUR))
    with pytest.raises(InvalidArgument, match=r"must be 5 s to 2 h, got 10800000 ms"):
        worker_servicer._lease_ms(Duration(seconds=3 * 3_600), "heartbeat.lease")
